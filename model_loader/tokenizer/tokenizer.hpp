// Tokenizer: text to token ids and back, from a checkpoint's tokenizer.json (Hugging Face
// tokenizers' format), as the `tokenizers` package computes them for the configurations Llama,
// Mistral, Qwen and GPT-2 checkpoints ship:
//   - added tokens (special or not) are matched in the raw text first, longest at the leftmost
//     position, with their lstrip / rstrip / single_word options;
//   - each stretch between them is normalized (text_normalizer.hpp), cut into pieces
//     (pre_tokenizer.hpp) and run through BPE (bpe_model.hpp);
//   - a TemplateProcessing post-processor adds BOS-like tokens when add_special_tokens is on;
//   - decoding maps ids back to token strings, drops special tokens when asked, and runs the
//     decoder (token_decoder.hpp).
// A component this does not implement is a ValueError naming it when the file is loaded,
// never a silent difference in ids.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hotswap::model_loader {

class Tokenizer {
 public:
  // ValueError naming the file and what is wrong or unsupported.
  static Tokenizer from_file(const std::filesystem::path& path);
  static Tokenizer from_json_text(std::string_view text, const std::string& origin);

  std::vector<std::int64_t> encode(std::string_view text, bool add_special_tokens = true) const;
  // The ids when there are at most `max_ids` of them; nothing as soon as it is certain that
  // there are more, for about the work of max_ids ids rather than of the whole text: a piece
  // whose byte length alone proves it (BpeModel::max_bytes_per_id) is not run through BPE.
  // The raw text's length proves nothing (an added token's lstrip / rstrip and the normalizers
  // can swallow any amount of it), so the check is made on the normalized pieces.
  // `cancelled` is asked every few hundred pieces: when it says true (the client went away,
  // the worker is stopping), a RuntimeError ends the work.
  std::optional<std::vector<std::int64_t>> encode_within(
      std::string_view text, bool add_special_tokens, std::size_t max_ids,
      const std::function<bool()>& cancelled = {}) const;
  // Ids without a token (past the vocabulary, or in a gap of it) are dropped, as tokenizers
  // drops them.
  std::string decode(const std::vector<std::int64_t>& ids, bool skip_special_tokens = false) const;

  // One more than the largest id of the vocabulary and the added tokens.
  std::int64_t vocab_size() const;
  std::optional<std::int64_t> token_to_id(std::string_view token) const;
  // The token's string as the vocabulary spells it (byte-level characters, ▁, <0xNN>).
  std::optional<std::string> id_to_token(std::int64_t id) const;
  bool is_special(std::int64_t id) const;

  struct State;

 private:
  std::shared_ptr<const State> state_;
};

}  // namespace hotswap::model_loader
