#include "model_loader/tokenizer/tokenizer.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <limits>
#include <unordered_map>

#include "model_loader/mapped_file.hpp"
#include "model_loader/tokenizer/bpe_model.hpp"
#include "model_loader/tokenizer/byte_level.hpp"
#include "model_loader/tokenizer/pre_tokenizer.hpp"
#include "model_loader/tokenizer/text_normalizer.hpp"
#include "model_loader/tokenizer/token_decoder.hpp"
#include "model_loader/tokenizer/tokenizer_json.hpp"
#include "model_loader/tokenizer/unicode_regex.hpp"
#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {

using json = nlohmann::json;

namespace {

// Real tokenizer.json files are a few MB (Llama-3's: 9 MB; a 256k vocabulary: ~35 MB).
constexpr std::size_t kMaxTokenizerBytes = 256u << 20;

struct AddedToken {
  std::int64_t id;
  std::string content;
  bool single_word, lstrip, rstrip, special;
};

// One item of a TemplateProcessing's `single`: a special token's ids, or the sequence itself.
struct TemplateItem {
  bool is_sequence;
  std::vector<std::int64_t> ids;
};

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_word_char(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

}  // namespace

struct Tokenizer::State {
  TextNormalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  TokenDecoder decoder;
  std::vector<AddedToken> added;
  std::vector<std::vector<std::size_t>> added_by_first_byte =
      std::vector<std::vector<std::size_t>>(256);
  std::unordered_map<std::string, std::int64_t> added_ids;
  std::vector<std::string> tokens;            // by id
  std::vector<bool> special;                  // by id
  std::vector<TemplateItem> single_template;  // empty: no post-processing

  // The text cut at added tokens: (text, -1) stretches and ("", id) tokens.
  std::vector<std::pair<std::string_view, std::int64_t>> split_on_added(
      std::string_view text) const;
};

std::vector<std::pair<std::string_view, std::int64_t>> Tokenizer::State::split_on_added(
    std::string_view text) const {
  std::vector<std::pair<std::string_view, std::int64_t>> out;
  std::size_t from = 0;  // start of the pending stretch
  for (std::size_t at = 0; at < text.size();) {
    const AddedToken* best = nullptr;
    for (std::size_t k : added_by_first_byte[static_cast<unsigned char>(text[at])]) {
      const AddedToken& t = added[k];
      if (text.compare(at, t.content.size(), t.content) != 0) continue;
      if (t.single_word &&
          ((at > 0 && is_word_char(text[at - 1])) ||
           (at + t.content.size() < text.size() && is_word_char(text[at + t.content.size()]))))
        continue;
      if (best == nullptr || t.content.size() > best->content.size()) best = &t;
    }
    if (best == nullptr) {
      ++at;
      continue;
    }
    std::size_t begin = at, end = at + best->content.size();
    if (best->lstrip)
      while (begin > from && is_space(text[begin - 1]))
        --begin;
    if (best->rstrip)
      while (end < text.size() && is_space(text[end]))
        ++end;
    if (begin > from) out.emplace_back(text.substr(from, begin - from), -1);
    out.emplace_back(std::string_view(), best->id);
    from = at = end;
  }
  if (from < text.size()) out.emplace_back(text.substr(from), -1);
  return out;
}

namespace {

std::vector<TemplateItem> single_template_of(
    const json& spec, const std::unordered_map<std::string, std::int64_t>& ids) {
  if (spec.is_null()) return {};
  const std::string type = required_string(spec, "type", "post_processor");
  if (type == "ByteLevel") return {};  // offsets only: ids unchanged
  if (type == "Sequence") {
    std::vector<TemplateItem> found;
    for (const auto& inner : required_array(spec, "processors", "Sequence post_processor")) {
      auto items = single_template_of(inner, ids);
      if (!items.empty()) {
        if (!found.empty()) {
          throw protocol::ValueError(
              "the tokenizer's post_processor Sequence has two templates; not supported");
        }
        found = std::move(items);
      }
    }
    return found;
  }
  if (type == "BertProcessing" || type == "RobertaProcessing") {
    auto id_of = [&](const char* field) {
      if (!spec.contains(field) || !spec[field].is_array() || spec[field].size() != 2 ||
          !spec[field][1].is_number_integer()) {
        throw protocol::ValueError("the tokenizer's " + type + " needs `" + field +
                                   "` as [token, id]");
      }
      return spec[field][1].get<std::int64_t>();
    };
    return {{false, {id_of("cls")}}, {true, {}}, {false, {id_of("sep")}}};
  }
  if (type != "TemplateProcessing") {
    throw protocol::ValueError("the tokenizer's post_processor '" + type +
                               "' is not supported (supported: TemplateProcessing, ByteLevel, "
                               "BertProcessing, RobertaProcessing, Sequence)");
  }
  const json& specials = spec.contains("special_tokens") ? spec["special_tokens"] : json::object();
  std::vector<TemplateItem> items;
  for (const auto& item : required_array(spec, "single", "TemplateProcessing post_processor")) {
    if (item.contains("Sequence")) {
      items.push_back({true, {}});
    } else if (item.contains("SpecialToken") && item["SpecialToken"].contains("id") &&
               item["SpecialToken"]["id"].is_string()) {
      const std::string name = item["SpecialToken"]["id"].get<std::string>();
      TemplateItem t{false, {}};
      if (specials.contains(name) && specials[name].contains("ids") &&
          specials[name]["ids"].is_array()) {
        for (const auto& id : specials[name]["ids"]) {
          if (!id.is_number_integer()) {
            throw protocol::ValueError("the tokenizer's template token '" + name +
                                       "' has an id that is not an integer");
          }
          t.ids.push_back(id.get<std::int64_t>());
        }
      } else if (auto it = ids.find(name); it != ids.end()) {
        t.ids.push_back(it->second);
      } else {
        throw protocol::ValueError("the tokenizer's template names '" + name +
                                   "', which it does not define");
      }
      items.push_back(std::move(t));
    } else {
      throw protocol::ValueError(
          "the tokenizer's TemplateProcessing has an item that is neither SpecialToken nor "
          "Sequence");
    }
  }
  return items;
}

}  // namespace

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
  return from_json_text(read_regular_file(path.string(), kMaxTokenizerBytes), path.string());
}

Tokenizer Tokenizer::from_json_text(std::string_view text, const std::string& origin) {
  try {
    auto parsed = protocol::parse_bounded_json(text);
    if (!parsed.ok()) throw protocol::ValueError(parsed.reason);
    const json& spec = parsed.value;
    if (!spec.is_object() || !spec.contains("model") || !spec["model"].is_object()) {
      throw protocol::ValueError("it has no `model` object");
    }
    const std::string model_type =
        spec["model"].contains("type") && spec["model"]["type"].is_string()
            ? spec["model"]["type"].get<std::string>()
            : std::string("BPE");
    if (model_type != "BPE") {
      throw protocol::ValueError("its model type '" + model_type +
                                 "' is not supported (supported: BPE)");
    }
    for (const char* field : {"truncation", "padding"}) {
      if (spec.contains(field) && !spec[field].is_null()) {
        throw protocol::ValueError(std::string("it sets `") + field +
                                   "`, which a server's tokenizer does not apply; not supported");
      }
    }
    auto state = std::make_shared<State>();
    state->model = BpeModel::from_json(spec["model"]);
    state->normalizer = TextNormalizer::from_json(spec.value("normalizer", json()));
    state->pre_tokenizer = PreTokenizer::from_json(spec.value("pre_tokenizer", json()));
    state->decoder = TokenDecoder::from_json(spec.value("decoder", json()));

    std::int64_t size = 0;
    for (const auto& [token, id] : state->model.vocab())
      size = std::max(size, id + 1);
    if (spec.contains("added_tokens") && !spec["added_tokens"].is_null()) {
      if (!spec["added_tokens"].is_array())
        throw protocol::ValueError("`added_tokens` is not an array");
      for (const auto& a : spec["added_tokens"]) {
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
            a["id"].get<std::int64_t>() < 0 ||
            a["id"].get<std::int64_t>() >= (std::int64_t{1} << 31) || !a.contains("content") ||
            !a["content"].is_string() || a["content"].get<std::string>().empty()) {
          throw protocol::ValueError(
              "an entry of `added_tokens` needs an id in [0, 2^31) and a non-empty content");
        }
        AddedToken t{a["id"].get<std::int64_t>(),
                     a["content"].get<std::string>(),
                     optional_bool(a, "single_word", false, "added token"),
                     optional_bool(a, "lstrip", false, "added token"),
                     optional_bool(a, "rstrip", false, "added token"),
                     optional_bool(a, "special", false, "added token")};
        size = std::max(size, t.id + 1);
        state->added_ids[t.content] = t.id;
        state->added_by_first_byte[static_cast<unsigned char>(t.content[0])].push_back(
            state->added.size());
        state->added.push_back(std::move(t));
      }
    }
    state->tokens.assign(static_cast<std::size_t>(size), std::string());
    state->special.assign(static_cast<std::size_t>(size), false);
    for (const auto& [token, id] : state->model.vocab())
      state->tokens[static_cast<std::size_t>(id)] = token;
    for (const auto& t : state->added) {
      state->tokens[static_cast<std::size_t>(t.id)] = t.content;
      state->special[static_cast<std::size_t>(t.id)] = t.special;
    }
    std::unordered_map<std::string, std::int64_t> all_ids = state->added_ids;
    for (const auto& [token, id] : state->model.vocab())
      all_ids.try_emplace(token, id);
    state->single_template = single_template_of(spec.value("post_processor", json()), all_ids);
    Tokenizer tokenizer;
    tokenizer.state_ = std::move(state);
    return tokenizer;
  } catch (const protocol::ValueError& e) {
    throw protocol::ValueError("tokenizer " + origin + ": " + e.what());
  }
}

std::vector<std::int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return *encode_within(text, add_special_tokens, std::numeric_limits<std::size_t>::max());
}

std::optional<std::vector<std::int64_t>> Tokenizer::encode_within(
    std::string_view text, bool add_special_tokens, std::size_t max_ids,
    const std::function<bool()>& cancelled) const {
  if (!utf8_valid(text)) throw protocol::ValueError("the text to tokenize is not valid UTF-8");
  std::vector<std::int64_t> ids;
  // The template's own ids count against the limit too.
  std::size_t template_ids = 0;
  if (add_special_tokens) {
    for (const auto& item : state_->single_template)
      template_ids += item.is_sequence ? 0 : item.ids.size();
  }
  if (template_ids > max_ids) return std::nullopt;
  const std::size_t limit = max_ids - template_ids;
  const std::optional<std::size_t> per_id = state_->model.max_bytes_per_id();
  std::size_t pieces = 0;
  const UnicodeRegex::CancelScope cancel_scope(cancelled);  // the pre-tokenizer's regex splits
  auto check_cancelled = [&] {
    if (cancelled && ++pieces % 256 == 0 && cancelled()) {
      throw protocol::RuntimeError(
          "tokenizing was cancelled: the client went away or the worker is stopping");
    }
  };
  bool first = true;
  for (const auto& [stretch, added_id] : state_->split_on_added(text)) {
    if (added_id >= 0) {
      ids.push_back(added_id);
    } else {
      const std::string normalized = state_->normalizer.normalize(std::string(stretch));
      for (const auto& piece : state_->pre_tokenizer.split(normalized, first)) {
        // One long word of a huge prompt would otherwise be merged whole before the count.
        if (per_id && (piece.size() + *per_id - 1) / *per_id > limit - std::min(limit, ids.size()))
          return std::nullopt;
        state_->model.tokenize(piece, ids);
        if (ids.size() > limit) return std::nullopt;
        check_cancelled();
      }
    }
    first = false;
    if (ids.size() > limit) return std::nullopt;
  }
  if (!add_special_tokens || state_->single_template.empty()) return ids;
  std::vector<std::int64_t> out;
  out.reserve(ids.size() + 4);
  for (const auto& item : state_->single_template) {
    if (item.is_sequence) {
      out.insert(out.end(), ids.begin(), ids.end());
    } else {
      out.insert(out.end(), item.ids.begin(), item.ids.end());
    }
  }
  return out;
}

std::string Tokenizer::decode(const std::vector<std::int64_t>& ids,
                              bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (std::int64_t id : ids) {
    // An id without a token is dropped, as the tokenizers package does: a model's embedding
    // often has more rows than its tokenizer has tokens (Qwen2: 151936 against 151665), and
    // sampling may pick one of the extra rows.
    if (id < 0 || id >= vocab_size()) continue;
    const auto i = static_cast<std::size_t>(id);
    if (state_->tokens[i].empty() || (skip_special_tokens && state_->special[i])) continue;
    tokens.push_back(state_->tokens[i]);
  }
  return state_->decoder.decode(std::move(tokens));
}

std::int64_t Tokenizer::vocab_size() const {
  return static_cast<std::int64_t>(state_->tokens.size());
}

std::optional<std::int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto it = state_->added_ids.find(std::string(token)); it != state_->added_ids.end())
    return it->second;
  if (auto it = state_->model.vocab().find(std::string(token)); it != state_->model.vocab().end())
    return it->second;
  return std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(std::int64_t id) const {
  if (id < 0 || id >= vocab_size()) return std::nullopt;
  return state_->tokens[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(std::int64_t id) const {
  return id >= 0 && id < vocab_size() && state_->special[static_cast<std::size_t>(id)];
}

}  // namespace hotswap::model_loader
