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

 private:
  std::unordered_map<std::string, std::int64_t> vocab_;
  // (left id, right id) → (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int64_t>> merges_;
  std::optional<std::int64_t> unk_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::int64_t byte_ids_[256];  // <0xNN> ids where byte_fallback is on, -1 when absent
};

}  // namespace hotswap::model_loader
