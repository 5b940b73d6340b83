#include "protocol/control_methods.hpp"

#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"

namespace hotswap::protocol {
namespace {

using nlohmann::json;

void any_object(const json&) {}  // validate_params has checked it is an object
void init_info(const json& params) {
  init_info_of(params);
}
void update_info(const json& params) {
  update_info_of(params);
}
void weight_version(const json& params) {
  weight_version_of(params);
}
void new_version(const json& params) {
  new_version_of(params);
}
void pause(const json& params) {
  PauseParams::from_json(params);
}
void shutdown_params(const json& params) {
  abort_update_of(params);
}
void abort_requests(const json& params) {
  AbortRequestsParams::from_json(params);
}
void world_size(const json& params) {
  WorldSizeParams::from_json(params);
}
void weight_checker(const json& params) {
  WeightCheckerParams::from_json(params);
}
void generate(const json& params) {
  GenerateParams::from_json(params);
}
void tokenize(const json& params) {
  if (params.is_object() && params.contains("messages")) {
    TokenizeChatParams::from_json(nlohmann::ordered_json(params));
  } else {
    TokenizeParams::from_json(params);
  }
}
void detokenize(const json& params) {
  DetokenizeParams::from_json(params);
}
void completions(const json& params) {
  CompletionParams::from_json(params);
}
void chat_completions(const json& params) {
  ChatCompletionParams::from_json(nlohmann::ordered_json(params));
}
void start_weight_update(const json& params) {
  StartWeightUpdateParams::from_json(params);
}
void load_lora_adapter(const json& params) {
  LoadLoraAdapterParams::from_json(params);
}
void unload_lora_adapter(const json& params) {
  UnloadLoraAdapterParams::from_json(params);
}

// A row names only the fields that differ from ControlMethod's defaults. GCC 12 warns of every
// field a designated initializer leaves out, default member initializer or not: not here.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

// A weight-transfer call: a POST with a JSON body, long, counted under `operation`.
ControlMethod weight_transfer_call(std::string_view name, std::string_view route,
                                   std::string_view operation, void (*validate)(const json&)) {
  return {.name = name,
          .http_verb = HttpVerb::kPost,
          .http_route = route,
          .takes_json_body = true,
          .long_running = true,
          .metric_operation = operation,
          .validate = validate};
}

// `method`, run by every tensor-parallel rank too.
ControlMethod on_every_rank(ControlMethod method) {
  method.runs_on_every_rank = true;
  return method;
}

// vLLM's runtime LoRA routes answer in plain text, their errors in OpenAI's shape.
constexpr std::string_view kPlainText = "text/plain; charset=utf-8";

}  // namespace

const std::vector<ControlMethod>& control_methods() {
  using namespace methods;
  using V = HttpVerb;
  static const std::vector<ControlMethod> table{
      on_every_rank(weight_transfer_call(kInitWeightTransferEngine, "/init_weight_transfer_engine",
                                         "init", init_info)),
      on_every_rank(weight_transfer_call(kShutdownWeightTransferEngine,
                                         "/shutdown_weight_transfer_engine", "shutdown",
                                         shutdown_params)),
      on_every_rank(weight_transfer_call(kStartWeightUpdate, "/start_weight_update", "start",
                                         start_weight_update)),
      weight_transfer_call(kStartDraftWeightUpdate, "/start_draft_weight_update", "start_draft",
                           any_object),
      on_every_rank(weight_transfer_call(kUpdateWeights, "/update_weights", "update", update_info)),
      on_every_rank(weight_transfer_call(kFinishWeightUpdate, "/finish_weight_update", "finish",
                                         weight_version)),
      // Setting a version is instant: answered on the socket's thread. vLLM 0.34 times it under
      // no operation.
      {.name = kUpdateWeightVersion,
       .http_verb = V::kPost,
       .http_route = "/update_weight_version",
       .takes_json_body = true,
       .validate = new_version},
      {.name = kWeightInfo,
       .http_verb = V::kGet,
       .http_route = "/weight_info",
       .validate = any_object},
      {.name = kPause,
       .http_verb = V::kPost,
       .http_route = "/pause",
       .query_fields = {"mode", "clear_cache"},
       .long_running = true,
       .validate = pause},
      {.name = kResume,
       .http_verb = V::kPost,
       .http_route = "/resume",
       .takes_json_body = true,
       .validate = any_object},
      {.name = kIsPaused, .http_verb = V::kGet, .http_route = "/is_paused", .validate = any_object},
      {.name = kAbortRequests,
       .http_verb = V::kPost,
       .http_route = "/abort_requests",
       .takes_json_body = true,
       .validate = abort_requests},
      {.name = kGetWorldSize,
       .http_verb = V::kGet,
       .http_route = "/get_world_size",
       .query_fields = {"include_dp"},
       .validate = world_size},
      {.name = kWeightChecker,
       .http_verb = V::kPost,
       .http_route = "/weight_checker",
       .takes_json_body = true,
       .long_running = true,
       .validate = weight_checker},
      {.name = kGenerate,
       .http_verb = V::kPost,
       .http_route = "/generate",
       .takes_json_body = true,
       .long_running = true,
       .cancelled_when_caller_leaves = true,
       .answered_when_done = true,
       .validate = generate},
      // A prompt may be megabytes of text: off the socket's thread.
      {.name = kTokenize,
       .http_verb = V::kPost,
       .http_route = "/tokenize",
       .takes_json_body = true,
       .long_running = true,
       .validate = tokenize,
       .openai = true,
       .keeps_key_order = true},
      {.name = kDetokenize,
       .http_verb = V::kPost,
       .http_route = "/detokenize",
       .takes_json_body = true,
       .long_running = true,
       .validate = detokenize,
       .openai = true},
      // vLLM's OpenAI-compatible server.
      {.name = kCompletions,
       .http_verb = V::kPost,
       .http_route = "/v1/completions",
       .takes_json_body = true,
       .long_running = true,
       .cancelled_when_caller_leaves = true,
       .answered_when_done = true,
       .validate = completions,
       .openai = true},
      {.name = kChatCompletions,
       .http_verb = V::kPost,
       .http_route = "/v1/chat/completions",
       .takes_json_body = true,
       .long_running = true,
       .cancelled_when_caller_leaves = true,
       .validate = chat_completions,
       .openai = true,
       .keeps_key_order = true},
      {.name = kModels,
       .http_verb = V::kGet,
       .http_route = "/v1/models",
       .validate = any_object,
       .openai = true},
      // Reading an adapter from disk is off the socket's thread.
      {.name = kLoadLoraAdapter,
       .http_verb = V::kPost,
       .http_route = "/v1/load_lora_adapter",
       .takes_json_body = true,
       .long_running = true,
       .validate = load_lora_adapter,
       .openai = true,
       .http_content_type = kPlainText,
       .runs_on_every_rank = true},
      {.name = kUnloadLoraAdapter,
       .http_verb = V::kPost,
       .http_route = "/v1/unload_lora_adapter",
       .takes_json_body = true,
       .validate = unload_lora_adapter,
       .openai = true,
       .http_content_type = kPlainText},
      {.name = kHealth,
       .http_verb = V::kGet,
       .http_route = "/health",
       .validate = any_object,
       .probe = true},
      {.name = kMetrics,
       .http_verb = V::kGet,
       .http_route = "/metrics",
       .validate = any_object,
       .probe = true,
       .http_content_type = "text/plain; version=0.0.4"},
      {.name = kShutdown, .long_running = true, .validate = any_object},
  };
  return table;
}
#pragma GCC diagnostic pop

bool carries_conversation(const ControlMethod& m, const json& params) {
  return m.keeps_key_order && params.is_object() && params.contains("messages");
}

const ControlMethod* find_control_method(std::string_view name) {
  for (const auto& m : control_methods()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

const ControlMethod& control_method(std::string_view name) {
  if (const auto* m = find_control_method(name)) return *m;
  throw MethodNotFound("Method not found: '" + std::string(name) + "'");
}

std::vector<std::string_view> method_names() {
  std::vector<std::string_view> out;
  for (const auto& m : control_methods())
    out.push_back(m.name);
  return out;
}

void validate_params(std::string_view method, const json& params) {
  if (!params.is_object()) throw ValueError("the params must be a JSON object");
  control_method(method).validate(params);
}

json control_methods_json() {
  json out = json::array();
  for (const auto& m : control_methods()) {
    json fields = json::array();
    for (auto f : m.query_fields)
      fields.push_back(f);
    out.push_back({{"name", m.name},
                   {"http_verb", m.http_verb == HttpVerb::kGet    ? json("GET")
                                 : m.http_verb == HttpVerb::kPost ? json("POST")
                                                                  : json(nullptr)},
                   {"http_route", m.http_route.empty() ? json(nullptr) : json(m.http_route)},
                   {"query_fields", fields},
                   {"takes_json_body", m.takes_json_body},
                   {"long_running", m.long_running},
                   {"openai", m.openai},
                   {"probe", m.probe},
                   {"http_content_type",
                    m.http_content_type.empty() ? json(nullptr) : json(m.http_content_type)},
                   {"metric_operation",
                    m.metric_operation.empty() ? json(nullptr) : json(m.metric_operation)},
                   {"keeps_key_order", m.keeps_key_order},
                   {"runs_on_every_rank", m.runs_on_every_rank}});
  }
  return {{"methods", out}};
}

}  // namespace hotswap::protocol
