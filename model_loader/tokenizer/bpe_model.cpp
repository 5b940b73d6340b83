#include "model_loader/tokenizer/bpe_model.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <queue>

#include "model_loader/tokenizer/byte_level.hpp"
#include "model_loader/tokenizer/tokenizer_json.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

using json = nlohmann::json;

namespace {
std::uint64_t pair_key(std::int64_t left, std::int64_t right) {
  return (static_cast<std::uint64_t>(left) << 32) | static_cast<std::uint32_t>(right);
}
}  // namespace

std::optional<std::size_t> BpeModel::max_bytes_per_id() const {
  if (fuse_unk_) return std::nullopt;
  return std::max<std::size_t>(longest_token_, 4);  // 4: the longest UTF-8 character
}

BpeModel BpeModel::from_json(const json& spec) {
  BpeModel m;
  if (!spec.is_object() || !spec.contains("vocab") || !spec["vocab"].is_object()) {
    throw protocol::ValueError("the tokenizer's BPE model needs a `vocab` object");
  }
  for (const auto& [token, id] : spec["vocab"].items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
        id.get<std::int64_t>() >= (std::int64_t{1} << 31)) {
      throw protocol::ValueError("the tokenizer's vocab gives '" + token +
                                 "' an id that is not an integer in [0, 2^31)");
    }
    m.vocab_[token] = id.get<std::int64_t>();
    m.longest_token_ = std::max(m.longest_token_, token.size());
  }
  for (const char* field : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (spec.contains(field) && !spec[field].is_null() &&
        !(spec[field].is_string() && spec[field].get<std::string>().empty())) {
      throw protocol::ValueError(std::string("the tokenizer's BPE model sets `") + field +
                                 "`, which is not supported");
    }
  }
  if (spec.contains("dropout") && !spec["dropout"].is_null() &&
      !(spec["dropout"].is_number() && spec["dropout"].get<double>() == 0.0)) {
    throw protocol::ValueError("the tokenizer's BPE model sets `dropout`, which is not supported");
  }
  m.fuse_unk_ = optional_bool(spec, "fuse_unk", false, "BPE model");
  m.byte_fallback_ = optional_bool(spec, "byte_fallback", false, "BPE model");
  m.ignore_merges_ = optional_bool(spec, "ignore_merges", false, "BPE model");
  if (spec.contains("unk_token") && spec["unk_token"].is_string()) {
    auto it = m.vocab_.find(spec["unk_token"].get<std::string>());
    if (it == m.vocab_.end()) {
      throw protocol::ValueError("the tokenizer's unk_token '" +
                                 spec["unk_token"].get<std::string>() + "' is not in its vocab");
    }
    m.unk_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m.vocab_.find(name);
    m.byte_ids_[b] = it == m.vocab_.end() ? -1 : it->second;
  }

  const json& merges = required_array(spec, "merges", "BPE model");
  std::int32_t rank = 0;
  for (const auto& merge : merges) {
    std::string left, right;
    if (merge.is_string()) {  // the older "a b" form
      const auto& text = merge.get_ref<const std::string&>();
      const auto space = text.find(' ', 1);
      if (space == std::string::npos) {
        throw protocol::ValueError("the tokenizer's merge '" + text + "' is not two tokens");
      }
      left = text.substr(0, space);
      right = text.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw protocol::ValueError("the tokenizer's merge #" + std::to_string(rank) +
                                 " is neither \"a b\" nor [\"a\", \"b\"]");
    }
    auto l = m.vocab_.find(left), r = m.vocab_.find(right), joined = m.vocab_.find(left + right);
    if (l == m.vocab_.end() || r == m.vocab_.end() || joined == m.vocab_.end()) {
      throw protocol::ValueError("the tokenizer's merge '" + left + "' + '" + right +
                                 "' names a token its vocab does not have");
    }
    // The first of two identical merges wins, as in tokenizers.
    m.merges_.try_emplace(pair_key(l->second, r->second), rank, joined->second);
    ++rank;
  }
  return m;
}

void BpeModel::tokenize(const std::string& piece, std::vector<std::int64_t>& out) const {
  if (piece.empty()) return;
  if (ignore_merges_) {
    if (auto it = vocab_.find(piece); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The piece's symbols: one per character, or its bytes' tokens, or unk.
  struct Symbol {
    std::int64_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(piece.size());
  bool last_was_unk = false;
  for (std::size_t at = 0; at < piece.size();) {
    const std::size_t n = utf8_length(piece, at);
    const std::string ch = piece.substr(at, n);
    at += n;
    if (auto it = vocab_.find(ch); it != vocab_.end()) {
      symbols.push_back({it->second, 0, 0, true});
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch)
        all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch)
          symbols.push_back({byte_ids_[b], 0, 0, true});
        last_was_unk = false;
        continue;
      }
    }
    if (!unk_) {
      throw protocol::ValueError("the tokenizer has no token for the character '" + ch +
                                 "' and neither byte_fallback nor an unk_token to stand for it");
    }
    if (!(fuse_unk_ && last_was_unk)) symbols.push_back({*unk_, 0, 0, true});
    last_was_unk = true;
  }
  const int count = static_cast<int>(symbols.size());
  for (int i = 0; i < count; ++i) {
    symbols[i].prev = i - 1;
    symbols[i].next = i + 1 < count ? i + 1 : -1;
  }
  // Candidate merges: (rank, position) smallest first; stale entries are skipped when popped.
  struct Candidate {
    std::int32_t rank;
    int left;
    std::int64_t left_id, right_id, merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto consider = [&](int left) {
    if (left < 0) return;
    const int right = symbols[left].next;
    if (right < 0) return;
    auto it = merges_.find(pair_key(symbols[left].id, symbols[right].id));
    if (it != merges_.end())
      queue.push({it->second.first, left, symbols[left].id, symbols[right].id, it->second.second});
  };
  for (int i = 0; i + 1 < count; ++i)
    consider(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (!left.alive || left.id != c.left_id || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    if (right.id != c.right_id) continue;
    left.id = c.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev);
    consider(c.left);
  }
  for (int i = 0; i >= 0 && i < count; i = symbols[i].next)
    out.push_back(symbols[i].id);
}

}  // namespace hotswap::model_loader
