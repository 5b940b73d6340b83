// BpeModel: the `model` of a tokenizer.json of type BPE: a vocabulary, merges ranked by their
// order, and the options byte-level and SentencePiece-style exports use (ignore_merges,
// byte_fallback to <0xNN> tokens, unk_token with fuse_unk). Merges apply lowest rank first,
// leftmost first among equal ranks, as tokenizers does. Dropout and word prefixes or suffixes
// are refused when the tokenizer is loaded.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace hotswap::model_loader {

class BpeModel {
 public:
  static BpeModel from_json(const nlohmann::json& spec);

  // The ids of one piece (from the pre-tokenizer), appended to `out`. ValueError when a
  // character has no token and neither byte fallback nor an unk token covers it.
  void tokenize(const std::string& piece, std::vector<std::int64_t>& out) const;

  const std::unordered_map<std::string, std::int64_t>& vocab() const { return vocab_; }
  // The most bytes of a piece one id can stand for (its longest vocabulary entry, or a whole
  // character for an unknown one), so a piece of n bytes gives at least n / this many ids;
  // nothing when unknown characters fuse into one id, which can stand for any number of them.
  std::optional<std::size_t> max_bytes_per_id() const;

 private:
  std::unordered_map<std::string, std::int64_t> vocab_;
  std::size_t longest_token_ = 0;
  // (left id, right id) → (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int64_t>> merges_;
  std::optional<std::int64_t> unk_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::int64_t byte_ids_[256];  // <0xNN> ids where byte_fallback is on, -1 when absent
};

}  // namespace hotswap::model_loader
