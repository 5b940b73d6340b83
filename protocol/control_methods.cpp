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

// A weight-transfer call: a POST with a JSON body, long, counted under `operation`.
ControlMethod weight_transfer_call(std::string_view name, std::string_view route,
                                   std::string_view operation, void (*validate)(const json&)) {
  return ControlMethod{name, HttpVerb::kPost, route, {}, true, true, false, operation, validate};
}

}  // namespace

const std::vector<ControlMethod>& control_methods() {
  using namespace methods;
  using V = HttpVerb;
  // name, verb, route, query fields, JSON body, long, cancelled when the caller leaves,
  // /metrics operation, validator.
  static const std::vector<ControlMethod> table{
      weight_transfer_call(kInitWeightTransferEngine, "/init_weight_transfer_engine", "init",
                           init_info),
      weight_transfer_call(kShutdownWeightTransferEngine, "/shutdown_weight_transfer_engine",
                           "shutdown", shutdown_params),
      weight_transfer_call(kStartWeightUpdate, "/start_weight_update", "start",
                           start_weight_update),
      weight_transfer_call(kStartDraftWeightUpdate, "/start_draft_weight_update", "start_draft",
                           any_object),
      weight_transfer_call(kUpdateWeights, "/update_weights", "update", update_info),
      weight_transfer_call(kFinishWeightUpdate, "/finish_weight_update", "finish", weight_version),
      // Setting a version is instant: answered on the socket's thread. vLLM 0.34 times it under
      // no operation.
      {kUpdateWeightVersion,
       V::kPost,
       "/update_weight_version",
       {},
       true,
       false,
       false,
       "",
       new_version},
      {kWeightInfo, V::kGet, "/weight_info", {}, false, false, false, "", any_object},
      {kPause, V::kPost, "/pause", {"mode", "clear_cache"}, false, true, false, "", pause},
      {kResume, V::kPost, "/resume", {}, true, false, false, "", any_object},
      {kIsPaused, V::kGet, "/is_paused", {}, false, false, false, "", any_object},
      {kAbortRequests, V::kPost, "/abort_requests", {}, true, false, false, "", abort_requests},
      {kGetWorldSize,
       V::kGet,
       "/get_world_size",
       {"include_dp"},
       false,
       false,
       false,
       "",
       world_size},
      {kWeightChecker, V::kPost, "/weight_checker", {}, true, true, false, "", weight_checker},
      {kGenerate, V::kPost, "/generate", {}, true, true, true, "", generate},
      // A prompt may be megabytes of text: off the socket's thread.
      {kTokenize,
       V::kPost,
       "/tokenize",
       {},
       true,
       true,
       false,
       "",
       tokenize,
       true,
       false,
       {},
       true},
      {kDetokenize, V::kPost, "/detokenize", {}, true, true, false, "", detokenize, true},
      // vLLM's OpenAI-compatible server.
      {kCompletions, V::kPost, "/v1/completions", {}, true, true, true, "", completions, true},
      {kChatCompletions,
       V::kPost,
       "/v1/chat/completions",
       {},
       true,
       true,
       true,
       "",
       chat_completions,
       true,
       false,
       {},
       true},
      {kModels, V::kGet, "/v1/models", {}, false, false, false, "", any_object, true},
      // vLLM's runtime LoRA routes: answered in plain text, errors in OpenAI's shape. Reading an
      // adapter from disk is off the socket's thread.
      {kLoadLoraAdapter,
       V::kPost,
       "/v1/load_lora_adapter",
       {},
       true,
       true,
       false,
       "",
       load_lora_adapter,
       true,
       false,
       "text/plain; charset=utf-8"},
      {kUnloadLoraAdapter,
       V::kPost,
       "/v1/unload_lora_adapter",
       {},
       true,
       false,
       false,
       "",
       unload_lora_adapter,
       true,
       false,
       "text/plain; charset=utf-8"},
      {kHealth, V::kGet, "/health", {}, false, false, false, "", any_object, false, true},
      {kMetrics,
       V::kGet,
       "/metrics",
       {},
       false,
       false,
       false,
       "",
       any_object,
       false,
       true,
       "text/plain; version=0.0.4"},
      {kShutdown, V::kNone, "", {}, false, true, false, "", any_object},
  };
  return table;
}

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
                   {"keeps_key_order", m.keeps_key_order}});
  }
  return {{"methods", out}};
}

}  // namespace hotswap::protocol
