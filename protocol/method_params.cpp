#include "protocol/method_params.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {
namespace {

using nlohmann::json;

const json* field(const json& params, const char* key) {
  if (!params.is_object()) throw ValueError("the params must be a JSON object");
  auto it = params.find(key);
  return it == params.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void wrong(const char* key, const std::string& wanted, const json& got) {
  throw ValueError(std::string("`") + key + "` must be " + wanted + ", got " + describe_json(got));
}

// An integer, or a float holding an integer exactly (Python's pydantic takes 16.0 for 16).
std::optional<std::int64_t> as_int64(const json& v) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<std::uint64_t>() > std::uint64_t(std::numeric_limits<std::int64_t>::max())) {
      return std::nullopt;
    }
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // 2^63 itself does not fit; every double below it that is whole does.
    if (std::isfinite(d) && d == std::floor(d) && d >= -9.223372036854775808e18 &&
        d < 9.223372036854775808e18) {
      return static_cast<std::int64_t>(d);
    }
  }
  return std::nullopt;
}

std::int64_t integer(const json& params, const char* key, std::int64_t fallback) {
  const json* v = field(params, key);
  if (v == nullptr) return fallback;
  auto n = as_int64(*v);
  if (!n) wrong(key, "an integer", *v);
  return *n;
}

double number(const json& params, const char* key, double fallback) {
  const json* v = field(params, key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) wrong(key, "a number", *v);
  return v->get<double>();
}

bool boolean(const json& params, const char* key, bool fallback) {
  const json* v = field(params, key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) wrong(key, "true or false", *v);
  return v->get<bool>();
}

std::optional<std::string> string(const json& params, const char* key) {
  const json* v = field(params, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) wrong(key, "a string", *v);
  return v->get<std::string>();
}

std::vector<std::int64_t> token_list(const json& params, const char* key) {
  const json* v = field(params, key);
  if (v == nullptr) return {};
  if (!v->is_array()) wrong(key, "a list of token ids", *v);
  std::vector<std::int64_t> out;
  out.reserve(v->size());
  for (std::size_t i = 0; i < v->size(); ++i) {
    auto id = as_int64((*v)[i]);
    if (!id || *id < 0) {
      throw ValueError(std::string("`") + key + "[" + std::to_string(i) +
                       "]` must be a non-negative integer token id, got " + describe_json((*v)[i]));
    }
    out.push_back(*id);
  }
  return out;
}

template <std::size_t N>
std::string one_of(const std::string& value, const char* what,
                   const std::array<std::string_view, N>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) != allowed.end()) return value;
  std::string list;
  for (std::size_t i = 0; i < N; ++i)
    list += (i == 0 ? "" : (i + 1 == N ? " or " : ", ")) + std::string(allowed[i]);
  throw ValueError(std::string("Invalid ") + what + " '" + value + "': expected " + list);
}

// Reads the sampling fields present in `params` into `p` and validates them.
void read_sampling_fields(const json& params, SamplingFields& p) {
  p.temperature = number(params, "temperature", p.temperature);
  p.top_p = number(params, "top_p", p.top_p);
  p.top_k = integer(params, "top_k", p.top_k);
  if (const json* seed = field(params, "seed")) {
    auto s = as_int64(*seed);
    if (!s) wrong("seed", "an integer", *seed);
    p.seed = static_cast<std::uint64_t>(*s);
  }
  p.min_p = number(params, "min_p", p.min_p);
  p.validate();
  if (p.top_k == -1) p.top_k = 0;  // vLLM's other spelling of "all"
}

}  // namespace

void SamplingFields::validate() const {
  for (auto [name, value] : {std::pair{"temperature", temperature}, std::pair{"top_p", top_p},
                             std::pair{"min_p", min_p}}) {
    if (!std::isfinite(value)) {
      throw ValueError(std::string(name) + " must be a finite number, got " +
                       std::to_string(value) + ".");
    }
  }
  if (!(temperature >= 0.0)) {
    throw ValueError("temperature must be non-negative, got " + std::to_string(temperature) + ".");
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) {
    throw ValueError("top_p must be in (0, 1], got " + std::to_string(top_p) + ".");
  }
  if (top_k < -1) {
    throw ValueError("top_k must be 0 (disable), or at least 1, got " + std::to_string(top_k) +
                     ".");
  }
  if (!(min_p >= 0.0 && min_p <= 1.0)) {
    throw ValueError("min_p must be in [0, 1], got " + std::to_string(min_p) + ".");
  }
}

GenerateParams GenerateParams::from_json(const json& params) {
  GenerateParams p;
  p.prompt_token_ids = token_list(params, "prompt_token_ids");
  if (p.prompt_token_ids.empty()) {
    throw ValueError("`prompt_token_ids` must be a non-empty list of token ids");
  }
  p.max_tokens = integer(params, "max_tokens", p.max_tokens);
  if (p.max_tokens < 1) {
    throw ValueError("max_tokens must be at least 1, got " + std::to_string(p.max_tokens));
  }
  read_sampling_fields(params, p);
  p.stop_token_ids = token_list(params, "stop_token_ids");
  if (const json* logprobs = field(params, "logprobs")) {
    if (logprobs->is_boolean()) {
      p.logprobs = logprobs->get<bool>();
    } else if (auto n = as_int64(*logprobs); n && *n >= 0) {
      p.logprobs = true;  // any count, 0 included, asks for the sampled token's logprob
    } else {
      wrong("logprobs", "a non-negative integer or a boolean", *logprobs);
    }
  }
  p.request_id = string(params, "request_id");
  p.return_weight_versions = boolean(params, "return_weight_versions", p.return_weight_versions);
  p.model = string(params, "model");
  return p;
}

namespace {

// A prompt of ids, checked as vLLM's pydantic model reads list[int].
std::vector<std::int64_t> prompt_ids(const json& ids, const std::string& where) {
  std::vector<std::int64_t> out;
  out.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto id = as_int64(ids[i]);
    if (!id || *id < 0) {
      throw ValueError("`" + where + "[" + std::to_string(i) +
                       "]` must be a non-negative integer token id, got " + describe_json(ids[i]));
    }
    out.push_back(*id);
  }
  return out;
}

std::vector<CompletionPrompt> completion_prompts(const json* prompt) {
  const std::string empty = "Either prompt or prompt_embeds must be provided and non-empty.";
  if (prompt == nullptr) throw ValueError(empty);
  const std::string shapes = "a string, a list of token ids, or a list of either";
  if (prompt->is_string()) {
    if (prompt->get_ref<const std::string&>().empty()) throw ValueError(empty);
    return {{prompt->get<std::string>(), {}}};
  }
  if (!prompt->is_array()) wrong("prompt", shapes, *prompt);
  if (prompt->empty()) throw ValueError("please provide at least one prompt");
  if (!(*prompt)[0].is_array() && !(*prompt)[0].is_string()) {
    return {{std::nullopt, prompt_ids(*prompt, "prompt")}};
  }
  std::vector<CompletionPrompt> out;
  for (std::size_t i = 0; i < prompt->size(); ++i) {
    const json& p = (*prompt)[i];
    const std::string where = "prompt[" + std::to_string(i) + "]";
    if (p.is_string()) {
      out.push_back({p.get<std::string>(), {}});
    } else if (p.is_array()) {
      out.push_back({std::nullopt, prompt_ids(p, where)});
    } else {
      throw ValueError("`" + where + "` must be a string or a list of token ids, got " +
                       describe_json(p));
    }
  }
  return out;
}

// The fields of vLLM's CompletionRequest.
const std::array<std::string_view, 25> kCompletionFields{"return_weight_versions",
                                                         "model",
                                                         "prompt",
                                                         "max_tokens",
                                                         "temperature",
                                                         "top_p",
                                                         "top_k",
                                                         "min_p",
                                                         "seed",
                                                         "n",
                                                         "stop",
                                                         "stop_token_ids",
                                                         "logprobs",
                                                         "echo",
                                                         "stream",
                                                         "stream_options",
                                                         "include_stop_str_in_output",
                                                         "ignore_eos",
                                                         "skip_special_tokens",
                                                         "add_special_tokens",
                                                         "return_token_ids",
                                                         "return_tokens_as_token_ids",
                                                         "user",
                                                         "priority",
                                                         "request_id"};

// vLLM's fields that change what is generated, which hotswap does not implement, with the value
// that leaves them off: set to anything else, they are refused rather than ignored.
bool at_default(const json& v, std::string_view key) {
  if (v.is_null()) return true;
  if (key == "frequency_penalty" || key == "presence_penalty") return v == 0;
  if (key == "repetition_penalty" || key == "length_penalty") return v == 1;
  if (key == "best_of") return v == 1;
  if (key == "use_beam_search") return v == false;
  if (key == "min_tokens") return v == 0;
  if (key == "prompt_logprobs") return false;
  return (v.is_array() || v.is_object() || v.is_string()) && v.empty();
}
const std::array<std::string_view, 17> kUnsupportedCompletionFields{"frequency_penalty",
                                                                    "presence_penalty",
                                                                    "repetition_penalty",
                                                                    "length_penalty",
                                                                    "best_of",
                                                                    "use_beam_search",
                                                                    "min_tokens",
                                                                    "logit_bias",
                                                                    "suffix",
                                                                    "allowed_token_ids",
                                                                    "bad_words",
                                                                    "prompt_embeds",
                                                                    "prompt_logprobs",
                                                                    "truncate_prompt_tokens",
                                                                    "guided_json",
                                                                    "response_format",
                                                                    "structured_outputs"};

}  // namespace

CompletionParams CompletionParams::from_json(const json& params) {
  CompletionParams p;
  field(params, "prompt");  // an object, or the ValueError saying it is not
  for (const auto& [key, value] : params.items()) {
    if (std::find(kUnsupportedCompletionFields.begin(), kUnsupportedCompletionFields.end(), key) !=
        kUnsupportedCompletionFields.end()) {
      if (!at_default(value, key)) {
        throw ValueError("`" + key + "` is not supported by hotswap's completions (got " +
                         describe_json(value) + ")");
      }
    } else if (std::find(kCompletionFields.begin(), kCompletionFields.end(), key) ==
               kCompletionFields.end()) {
      p.ignored_fields.push_back(key);
    }
  }
  p.model = string(params, "model");
  p.prompts = completion_prompts(field(params, "prompt"));
  if (params.contains("max_tokens") && params["max_tokens"].is_null()) {
    p.max_tokens = std::nullopt;
  } else {
    p.max_tokens = integer(params, "max_tokens", 16);
    if (*p.max_tokens < 0) {
      throw ValueError("max_tokens must be at least 0, got " + std::to_string(*p.max_tokens) + ".");
    }
  }
  read_sampling_fields(params, p);
  p.n = integer(params, "n", p.n);
  if (p.n < 1) throw ValueError("n must be at least 1, got " + std::to_string(p.n) + ".");
  if (p.n > kMaxN) {
    throw ValueError("n must be at most " + std::to_string(kMaxN) + ", got " + std::to_string(p.n) +
                     ".");
  }
  // Greedy samples would all be the same sequence.
  if (p.n > 1 && p.temperature < kSamplingEpsilon) {
    throw ValueError("n must be 1 when using greedy sampling, got " + std::to_string(p.n) + ".");
  }
  if (const json* stop = field(params, "stop")) {
    if (stop->is_string()) {
      p.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array() && std::all_of(stop->begin(), stop->end(),
                                               [](const json& s) { return s.is_string(); })) {
      p.stop = stop->get<std::vector<std::string>>();
    } else {
      wrong("stop", "a string or a list of strings", *stop);
    }
    if (std::any_of(p.stop.begin(), p.stop.end(), [](const auto& s) { return s.empty(); })) {
      throw ValueError("stop cannot contain an empty string.");
    }
  }
  p.stop_token_ids = token_list(params, "stop_token_ids");
  if (const json* logprobs = field(params, "logprobs")) {
    auto n = as_int64(*logprobs);
    if (!n || logprobs->is_boolean()) wrong("logprobs", "an integer", *logprobs);
    if (*n < 0) throw ValueError("`logprobs` must be a positive value.");
    if (*n > kMaxLogprobs) {
      throw ValueError("Requested sample logprobs of " + std::to_string(*n) +
                       ", which is greater than max allowed: " + std::to_string(kMaxLogprobs));
    }
    p.logprobs = *n;
  }
  p.echo = boolean(params, "echo", p.echo);
  p.stream = boolean(params, "stream", p.stream);
  if (const json* options = field(params, "stream_options")) {
    if (!options->is_object()) wrong("stream_options", "an object", *options);
    if (!p.stream) throw ValueError("Stream options can only be defined when `stream=True`.");
    p.include_usage = boolean(*options, "include_usage", true);
    p.continuous_usage_stats = boolean(*options, "continuous_usage_stats", false);
  }
  p.include_stop_str_in_output =
      boolean(params, "include_stop_str_in_output", p.include_stop_str_in_output);
  p.ignore_eos = boolean(params, "ignore_eos", p.ignore_eos);
  p.skip_special_tokens = boolean(params, "skip_special_tokens", p.skip_special_tokens);
  p.add_special_tokens = boolean(params, "add_special_tokens", p.add_special_tokens);
  p.return_token_ids = boolean(params, "return_token_ids", p.return_token_ids);
  p.return_weight_versions = boolean(params, "return_weight_versions", p.return_weight_versions);
  p.request_id = string(params, "request_id");
  p.return_tokens_as_token_ids =
      boolean(params, "return_tokens_as_token_ids", p.return_tokens_as_token_ids);
  if (p.max_tokens == 0 && !p.echo) throw ValueError("max_tokens must be at least 1, got 0.");
  string(params, "user");
  string(params, "request_id");
  integer(params, "priority", 0);
  return p;
}

bool abort_update_of(const json& params) {
  return boolean(params, "abort_update", false);
}

AbortRequestsParams AbortRequestsParams::from_json(const json& params) {
  AbortRequestsParams p;
  const json* ids = field(params, "request_ids");
  if (ids == nullptr) return p;
  if (!ids->is_array()) wrong("request_ids", "a list of request ids", *ids);
  for (const auto& id : *ids) {
    if (!id.is_string()) wrong("request_ids", "a list of strings", *ids);
    p.request_ids.push_back(id.get<std::string>());
  }
  return p;
}

PauseParams PauseParams::from_json(const json& params) {
  PauseParams p;
  if (auto mode = string(params, "mode")) {
    p.mode = one_of(*mode, "pause mode", std::array<std::string_view, 3>{"abort", "wait", "keep"});
  }
  p.clear_cache = boolean(params, "clear_cache", p.clear_cache);
  return p;
}

TokenizeParams TokenizeParams::from_json(const json& params) {
  TokenizeParams p;
  if (field(params, "messages") != nullptr) {
    throw ValueError("tokenize with `messages` is read by TokenizeChatParams");
  }
  auto prompt = string(params, "prompt");
  if (!prompt) throw ValueError("tokenize needs `prompt`, a string");
  p.prompt = std::move(*prompt);
  p.add_special_tokens = boolean(params, "add_special_tokens", p.add_special_tokens);
  p.return_token_strs = boolean(params, "return_token_strs", p.return_token_strs);
  return p;
}

StartWeightUpdateParams StartWeightUpdateParams::from_json(const json& params) {
  StartWeightUpdateParams p;
  p.lora_name = string(params, "lora_name");
  if (p.lora_name && p.lora_name->empty()) throw ValueError("`lora_name` must not be empty");
  if (auto config = field(params, "lora_config")) {
    if (!config->is_object()) {
      throw ValueError("`lora_config` must be an object (PEFT's adapter_config.json fields)");
    }
    if (!p.lora_name) throw ValueError("`lora_config` is given without `lora_name`");
    p.lora_config = *config;
  }
  return p;
}

LoadLoraAdapterParams LoadLoraAdapterParams::from_json(const json& params) {
  LoadLoraAdapterParams p;
  p.lora_name = string(params, "lora_name").value_or("");
  p.lora_path = string(params, "lora_path").value_or("");
  if (p.lora_name.empty() || p.lora_path.empty()) {
    throw ValueError("Both 'lora_name' and 'lora_path' must be provided.");
  }
  p.load_inplace = boolean(params, "load_inplace", p.load_inplace);
  return p;
}

UnloadLoraAdapterParams UnloadLoraAdapterParams::from_json(const json& params) {
  UnloadLoraAdapterParams p;
  p.lora_name = string(params, "lora_name").value_or("");
  if (p.lora_name.empty()) throw ValueError("unload_lora_adapter needs `lora_name`, a string");
  return p;
}

DetokenizeParams DetokenizeParams::from_json(const json& params) {
  DetokenizeParams p;
  if (field(params, "tokens") == nullptr)
    throw ValueError("detokenize needs `tokens`, a list of token ids");
  p.tokens = token_list(params, "tokens");
  return p;
}

WorldSizeParams WorldSizeParams::from_json(const json& params) {
  WorldSizeParams p;
  p.include_dp = boolean(params, "include_dp", p.include_dp);
  return p;
}

WeightCheckerParams WeightCheckerParams::from_json(const json& params) {
  WeightCheckerParams p;
  p.action = one_of(string(params, "action").value_or(""), "weight_checker action",
                    std::array<std::string_view, 3>{"checksum", "compare", "reset"});
  if (auto format = string(params, "format")) {
    p.format = one_of(*format, "weight_checker format",
                      std::array<std::string_view, 2>{"runtime", "checkpoint"});
  }
  if (p.action == "compare") {
    const json* baseline = field(params, "baseline");
    if (baseline == nullptr || !baseline->is_object()) {
      throw ValueError("action='compare' requires a 'baseline' object");
    }
    for (const auto& [name, hex] : baseline->items()) {
      if (!hex.is_string()) {
        throw ValueError("`baseline['" + name + "']` must be a string, got " + describe_json(hex));
      }
      p.baseline[name] = hex.get<std::string>();
    }
  }
  p.lora_name = string(params, "lora_name");
  if (p.lora_name && p.action == "reset") {
    throw ValueError("action='reset' zeroes the model's weights and takes no 'lora_name'");
  }
  if (p.lora_name && p.format == "runtime" && field(params, "format") != nullptr) {
    throw ValueError(
        "a LoRA adapter's checksums are of its tensors as they arrived: "
        "format='checkpoint' (or none) with 'lora_name'");
  }
  return p;
}

const json& init_info_of(const json& params) {
  const json* info = field(params, "init_info");
  if (info == nullptr) throw ValueError("Missing 'init_info' in request body");
  if (!info->is_object()) wrong("init_info", "a JSON object", *info);
  return *info;
}

const json& update_info_of(const json& params) {
  const json* info = field(params, "update_info");
  if (info == nullptr) throw ValueError("Missing 'update_info' in request body");
  if (info->is_array()) {
    for (std::size_t i = 0; i < info->size(); ++i) {
      if (!(*info)[i].is_object()) {
        throw ValueError("`update_info[" + std::to_string(i) +
                         "]` must be a JSON object (one per rank), got " +
                         describe_json((*info)[i]));
      }
    }
  } else if (!info->is_object()) {
    wrong("update_info", "an object or a list of objects", *info);
  }
  return *info;
}

std::optional<std::string> weight_version_of(const json& params) {
  return string(params, "weight_version");
}

std::string new_version_of(const json& params) {
  auto version = string(params, "new_version");
  if (!version) throw ValueError("Missing 'new_version' in request body");
  return *version;
}

}  // namespace hotswap::protocol

namespace hotswap::protocol {
namespace {

// The conversation fields both chat requests share, checked as vLLM checks them.
ChatConversation read_conversation(const nlohmann::ordered_json& ordered, const json& params) {
  ChatConversation c;
  const auto messages = ordered.find("messages");
  if (messages == ordered.end()) throw ValueError("the request needs `messages`, a list");
  if (!messages->is_array()) wrong("messages", "a list of messages", params["messages"]);
  c.messages = *messages;
  if (auto tools = ordered.find("tools"); tools != ordered.end() && !tools->is_null()) {
    if (!tools->is_array()) wrong("tools", "a list of tools", params["tools"]);
    if (tools->empty()) {
      throw ValueError(
          "`tools` must not be an empty array. Either provide at least one tool or omit the field "
          "entirely.");
    }
    c.tools = *tools;
  }
  if (auto documents = ordered.find("documents");
      documents != ordered.end() && !documents->is_null()) {
    if (!documents->is_array()) wrong("documents", "a list of documents", params["documents"]);
    c.documents = *documents;
  }
  c.add_generation_prompt = boolean(params, "add_generation_prompt", c.add_generation_prompt);
  c.continue_final_message = boolean(params, "continue_final_message", c.continue_final_message);
  if (c.add_generation_prompt && c.continue_final_message) {
    throw ValueError(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  c.chat_template = string(params, "chat_template");
  if (auto kwargs = ordered.find("chat_template_kwargs");
      kwargs != ordered.end() && !kwargs->is_null()) {
    if (!kwargs->is_object()) {
      wrong("chat_template_kwargs", "an object", params["chat_template_kwargs"]);
    }
    std::string unexpected;
    for (const char* key : {"chat_template", "tokenize"}) {
      if (kwargs->contains(key))
        unexpected += (unexpected.empty() ? "'" : ", '") + std::string(key) + "'";
    }
    if (!unexpected.empty()) {
      throw ValueError("Found unexpected chat template kwargs from request: {" + unexpected + "}");
    }
    // hotswap's rule: the conversation's own variables are the conversation's.
    for (const char* key : {"messages", "tools", "documents", "add_generation_prompt"}) {
      if (kwargs->contains(key)) {
        throw ValueError(std::string("chat_template_kwargs cannot set `") + key +
                         "`: it is the request's own field");
      }
    }
    c.chat_template_kwargs = *kwargs;
  }
  return c;
}

// The chat fields completions does not have: read here, and left out of what completions reads.
constexpr std::array<const char*, 15> kChatOnlyFields{"messages",
                                                      "tools",
                                                      "tool_choice",
                                                      "parallel_tool_calls",
                                                      "documents",
                                                      "chat_template",
                                                      "chat_template_kwargs",
                                                      "add_generation_prompt",
                                                      "continue_final_message",
                                                      "echo",
                                                      "logprobs",
                                                      "top_logprobs",
                                                      "max_completion_tokens",
                                                      "reasoning_effort",
                                                      "include_reasoning"};

}  // namespace

ChatCompletionParams ChatCompletionParams::from_json(const nlohmann::ordered_json& ordered) {
  if (!ordered.is_object()) throw ValueError("a chat completion request is a JSON object");
  const json params(ordered);
  ChatCompletionParams p;
  p.conversation = read_conversation(ordered, params);

  const json* choice = field(params, "tool_choice");
  const std::string tool_choice = choice == nullptr
                                      ? (p.conversation.tools.is_null() ? "none" : "auto")
                                  : choice->is_string() ? choice->get<std::string>()
                                                        : "a named tool";
  if (choice != nullptr && !choice->is_string() && !choice->is_object()) {
    throw ValueError("Invalid value for `tool_choice`: " + choice->dump() +
                     "! Only named tools, \"none\", \"auto\" or \"required\" are supported.");
  }
  if (choice != nullptr && choice->is_string() && tool_choice != "none" && tool_choice != "auto" &&
      tool_choice != "required") {
    throw ValueError("Invalid value for `tool_choice`: " + tool_choice +
                     "! Only named tools, \"none\", \"auto\" or \"required\" are supported.");
  }
  if (tool_choice != "none" && p.conversation.tools.is_null()) {
    throw ValueError("When using `tool_choice`, `tools` must be set.");
  }
  if (tool_choice == "required" || tool_choice == "a named tool") {
    throw ValueError("`tool_choice` " + (choice->is_string() ? "\"required\"" : choice->dump()) +
                     " needs a tool-call parser, which hotswap does not have: use \"auto\" or "
                     "\"none\" (the tools reach the template; the reply comes back as text)");
  }

  p.logprobs = boolean(params, "logprobs", p.logprobs);
  if (const json* top = field(params, "top_logprobs")) {
    const auto n = as_int64(*top);
    if (!n || top->is_boolean()) throw ValueError("`top_logprobs` must be an integer.");
    if (*n < 0 && *n != -1) throw ValueError("`top_logprobs` must be a positive value or -1.");
    if ((*n == -1 || *n > 0) && !p.logprobs) {
      throw ValueError("when using `top_logprobs`, `logprobs` must be set to true.");
    }
    if (*n == -1 || *n > kMaxLogprobs) {
      throw ValueError("Requested sample logprobs of " +
                       (*n == -1 ? std::string("-1 (the whole vocabulary)") : std::to_string(*n)) +
                       ", which is greater than max allowed: " + std::to_string(kMaxLogprobs));
    }
    p.top_logprobs = *n;
  }
  p.echo = boolean(params, "echo", p.echo);
  if (auto effort = string(params, "reasoning_effort")) {
    // vLLM hands it to the template; a template that reads it decides what it means.
    if (!p.conversation.chat_template_kwargs.is_object()) {
      p.conversation.chat_template_kwargs = nlohmann::ordered_json::object();
    }
    p.conversation.chat_template_kwargs["reasoning_effort"] = *effort;
  }
  boolean(params, "include_reasoning", true);  // no reasoning parser: nothing to leave out
  boolean(params, "parallel_tool_calls", true);

  // The rest is completions' own: read by CompletionParams, the prompt a placeholder.
  json completion = params;
  for (const char* key : kChatOnlyFields)
    completion.erase(key);
  const json* max_completion = field(params, "max_completion_tokens");
  if (max_completion != nullptr) {
    completion["max_tokens"] = *max_completion;
  } else if (field(params, "max_tokens") == nullptr) {
    completion["max_tokens"] = nullptr;  // chat's default: whatever the context leaves
  }
  if (p.logprobs) completion["logprobs"] = p.top_logprobs;
  if (!completion.contains("add_special_tokens")) completion["add_special_tokens"] = false;
  completion["prompt"] = json::array({0});
  p.completion = CompletionParams::from_json(completion);
  p.completion.prompts.clear();
  return p;
}

TokenizeChatParams TokenizeChatParams::from_json(const nlohmann::ordered_json& ordered) {
  if (!ordered.is_object()) throw ValueError("a tokenize request is a JSON object");
  const json params(ordered);
  TokenizeChatParams p;
  p.conversation = read_conversation(ordered, params);
  p.add_special_tokens = boolean(params, "add_special_tokens", p.add_special_tokens);
  p.return_token_strs = boolean(params, "return_token_strs", p.return_token_strs);
  return p;
}

}  // namespace hotswap::protocol
