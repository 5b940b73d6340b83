// The params of each control method, read and validated the way vLLM validates its request
// bodies, without any worker state: a wrong type or a value out of range is a ValueError naming
// the field (-32602, HTTP 400), never a JSON library error. The worker reads its methods'
// params through these; control_methods.hpp names each method's validator; the fuzzer runs
// them on arbitrary input. No libtorch.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

// vLLM's _SAMPLING_EPS and _MAX_TEMP (vllm/sampling_params.py): a temperature under the first
// is greedy, one under the second is raised to it.
inline constexpr double kSamplingEpsilon = 1e-5;
inline constexpr double kMinTemperature = 1e-2;

// The sampling fields every generating request shares, named and bounded as vLLM's
// SamplingParams has them: read from the params by the request's from_json, checked by the one
// validator below, and handed to model_loader's SamplingParams (which derives from them) as is.
struct SamplingFields {
  double temperature = 1.0;  // >= 0, finite; 0 is greedy
  double top_p = 1.0;        // in (0, 1]: the smallest set of tokens holding this probability
  std::int64_t top_k = 0;    // the k likeliest tokens only; 0 (or vLLM's -1): all
  double min_p = 0.0;        // in [0, 1]: tokens at least min_p times as likely as the likeliest
  std::optional<std::uint64_t> seed;

  // ValueError naming the field, in vLLM's words, for a value out of range (non-finite numbers
  // included: 1e999 reads as infinity from JSON).
  void validate() const;
};

// `generate {prompt_token_ids, max_tokens, temperature, top_p, top_k, min_p, seed,
// stop_token_ids, logprobs}`.
struct GenerateParams : SamplingFields {
  std::vector<std::int64_t> prompt_token_ids;  // non-empty, each >= 0
  std::int64_t max_tokens = 16;                // >= 1 (vLLM's default for completions)
  std::vector<std::int64_t> stop_token_ids;
  bool logprobs = false;  // vLLM's count of alternatives; hotswap returns the sampled token's
  // hotswap's extensions: the id `abort_requests` names it by (one is made up when absent), and
  // whether the result carries its `weight_versions` spans (null when false).
  std::optional<std::string> request_id;
  bool return_weight_versions = true;
  // As completions read it: the model served, or a LoRA adapter by its name.
  std::optional<std::string> model;

  static GenerateParams from_json(const nlohmann::json& params);
};

// `tokenize {prompt, add_special_tokens, return_token_strs}`: vLLM's TokenizeCompletionRequest
// (its `model` field is accepted and not checked). With `messages`, TokenizeChatParams.
struct TokenizeParams {
  std::string prompt;
  bool add_special_tokens = true;
  bool return_token_strs = false;

  static TokenizeParams from_json(const nlohmann::json& params);
};

// start_weight_update's body: vLLM's fields are accepted and not read; hotswap's extension
// `lora_name` makes the round an adapter's (its tensors PEFT's, served under that name at
// finish), with `lora_config` (PEFT's adapter_config.json fields) for an adapter not yet served.
struct StartWeightUpdateParams {
  std::optional<std::string> lora_name;
  std::optional<nlohmann::json> lora_config;

  static StartWeightUpdateParams from_json(const nlohmann::json& params);
};

// vLLM's LoadLoRAAdapterRequest: serve the adapter at `lora_path` as `lora_name`; with
// `load_inplace`, in place of the adapter already served under that name.
struct LoadLoraAdapterParams {
  std::string lora_name;
  std::string lora_path;
  bool load_inplace = false;

  static LoadLoraAdapterParams from_json(const nlohmann::json& params);
};

// vLLM's UnloadLoRAAdapterRequest.
struct UnloadLoraAdapterParams {
  std::string lora_name;

  static UnloadLoraAdapterParams from_json(const nlohmann::json& params);
};

// `detokenize {tokens}`: vLLM's DetokenizeRequest.
struct DetokenizeParams {
  std::vector<std::int64_t> tokens;

  static DetokenizeParams from_json(const nlohmann::json& params);
};

// One prompt of a completion request: text (tokenized by the worker) or token ids.
struct CompletionPrompt {
  std::optional<std::string> text;
  std::vector<std::int64_t> token_ids;  // when given as ids
};

// `completions`: vLLM's CompletionRequest (POST /v1/completions). Fields vLLM accepts whose
// effect hotswap does not implement are refused by name when set to anything but their default;
// fields neither knows are accepted and listed in `ignored_fields`, as vLLM accepts and logs
// them.
struct CompletionParams : SamplingFields {
  static constexpr std::int64_t kMaxLogprobs = 20;  // vLLM's default --max-logprobs
  static constexpr std::int64_t kMaxN = 16384;      // vLLM's VLLM_MAX_N_SEQUENCES

  std::optional<std::string> model;
  std::vector<CompletionPrompt> prompts;  // a string, ids, or a batch of either
  // null: whatever the context leaves; 0 with echo: the prompt back, nothing generated.
  std::optional<std::int64_t> max_tokens = 16;
  std::int64_t n = 1;
  std::vector<std::string> stop;
  std::vector<std::int64_t> stop_token_ids;
  std::optional<std::int64_t> logprobs;  // alternatives per token, up to kMaxLogprobs
  bool echo = false;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats
  bool include_stop_str_in_output = false;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool add_special_tokens = true;
  bool return_token_ids = false;
  bool return_tokens_as_token_ids = false;
  // vLLM 0.34: each choice's `weight_versions` spans over its output tokens (null when false).
  bool return_weight_versions = false;
  // vLLM's `request_id`: the completion's id is "cmpl-<request_id>" (random when absent), the
  // external id `abort_requests` names.
  std::optional<std::string> request_id;
  std::vector<std::string> ignored_fields;

  static CompletionParams from_json(const nlohmann::json& params);
};

// What a chat template renders (the fields of vLLM's chat requests of the same names). Kept as
// the request ordered its keys: a template's `tojson` writes a tool schema in that order.
struct ChatConversation {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;      // null, or a non-empty list of tool schemas
  nlohmann::ordered_json documents;  // null, or a list of {title, text, ...}
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  std::optional<std::string> chat_template;     // the request's own template, or a name of one
  nlohmann::ordered_json chat_template_kwargs;  // null, or an object of extra variables
};

// `chat_completions`: vLLM's ChatCompletionRequest (POST /v1/chat/completions). What it shares
// with completions is read exactly as completions reads it (`completion`, whose prompt the
// worker fills with the rendered conversation); the rest is the conversation and chat's own
// logprobs, echo and tool fields. Tool definitions reach the template; with no tool parser,
// `tool_choice` other than "none" and "auto" is refused by name.
struct ChatCompletionParams {
  static constexpr std::int64_t kMaxLogprobs = CompletionParams::kMaxLogprobs;

  CompletionParams completion;  // prompts empty
  ChatConversation conversation;
  bool logprobs = false;
  std::int64_t top_logprobs = 0;  // alternatives per token, with logprobs
  bool echo = false;              // the last message's content first, when it is the reply's role

  static ChatCompletionParams from_json(const nlohmann::ordered_json& params);
};

// `tokenize` with `messages`: vLLM's TokenizeChatRequest (the conversation as the chat route
// renders it, special tokens not added by default).
struct TokenizeChatParams {
  ChatConversation conversation;
  bool add_special_tokens = false;
  bool return_token_strs = false;

  static TokenizeChatParams from_json(const nlohmann::ordered_json& params);
};

// `models`: GET /v1/models takes nothing.

// `abort_requests {request_ids}`: vLLM 0.34's body; empty or absent aborts everything in flight.
struct AbortRequestsParams {
  std::vector<std::string> request_ids;

  static AbortRequestsParams from_json(const nlohmann::json& params);
};

// `pause {mode: abort|wait|keep, clear_cache}`.
struct PauseParams {
  std::string mode = "abort";
  bool clear_cache = false;

  static PauseParams from_json(const nlohmann::json& params);
};

// `get_world_size {include_dp}`.
struct WorldSizeParams {
  bool include_dp = true;

  static WorldSizeParams from_json(const nlohmann::json& params);
};

// `weight_checker {action: checksum|compare|reset, format: runtime|checkpoint, baseline}`.
struct WeightCheckerParams {
  std::string action;
  std::string format = "runtime";
  std::map<std::string, std::string> baseline;  // for compare: name -> hex digest
  // hotswap's extension: checksum and compare address this LoRA adapter's tensors (as they
  // arrived, by PEFT's saved names) instead of the model's; reset takes none.
  std::optional<std::string> lora_name;

  static WeightCheckerParams from_json(const nlohmann::json& params);
};

// The bodies of the weight-transfer routes: what vLLM's routes reject with a 400 before any work
// (and before counting the operation in /metrics).
const nlohmann::json& init_info_of(const nlohmann::json& params);    // `init_info`: an object
const nlohmann::json& update_info_of(const nlohmann::json& params);  // object or list of objects
std::optional<std::string> weight_version_of(const nlohmann::json& params);  // finish's, optional
std::string new_version_of(const nlohmann::json& params);  // update_weight_version's, required
// shutdown_weight_transfer_engine's `abort_update` (hotswap's extension; default false): end a
// session in progress first, where vLLM 0.34 refuses to release its trainer.
bool abort_update_of(const nlohmann::json& params);

}  // namespace hotswap::protocol
