// The control methods, in one table: each method's name, its HTTP route and verb, where the
// route reads its params, whether it may run long, the operation /metrics counts it as, the
// validator its params pass before any work, and whether the tensor-parallel ranks run it too.
// Rows name their fields (designated initializers), so a row reads without a legend. The ZeroMQ
// dispatcher, the HTTP server, /metrics, the C++ clients and (through `hotswap-worker
// --control-methods`) the Python client all read this table; a method is added here and nowhere
// else but its handler. docs/architecture.md lists the same methods for people. No libtorch.
#pragma once

#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

// The method names, vLLM's route names.
namespace methods {
inline constexpr std::string_view kInitWeightTransferEngine = "init_weight_transfer_engine";
inline constexpr std::string_view kShutdownWeightTransferEngine = "shutdown_weight_transfer_engine";
inline constexpr std::string_view kStartWeightUpdate = "start_weight_update";
inline constexpr std::string_view kStartDraftWeightUpdate = "start_draft_weight_update";
inline constexpr std::string_view kUpdateWeights = "update_weights";
inline constexpr std::string_view kFinishWeightUpdate = "finish_weight_update";
inline constexpr std::string_view kUpdateWeightVersion = "update_weight_version";
inline constexpr std::string_view kWeightInfo = "weight_info";
inline constexpr std::string_view kPause = "pause";
inline constexpr std::string_view kResume = "resume";
inline constexpr std::string_view kIsPaused = "is_paused";
inline constexpr std::string_view kAbortRequests = "abort_requests";
inline constexpr std::string_view kGetWorldSize = "get_world_size";
inline constexpr std::string_view kWeightChecker = "weight_checker";
inline constexpr std::string_view kGenerate = "generate";
inline constexpr std::string_view kTokenize = "tokenize";
inline constexpr std::string_view kDetokenize = "detokenize";
inline constexpr std::string_view kCompletions = "completions";            // POST /v1/completions
inline constexpr std::string_view kChatCompletions = "chat_completions";   // /v1/chat/completions
inline constexpr std::string_view kModels = "models";                      // GET /v1/models
inline constexpr std::string_view kLoadLoraAdapter = "load_lora_adapter";  // /v1/load_lora_adapter
inline constexpr std::string_view kUnloadLoraAdapter = "unload_lora_adapter";
inline constexpr std::string_view kHealth = "health";
inline constexpr std::string_view kMetrics = "metrics";  // GET /metrics
inline constexpr std::string_view kShutdown = "shutdown";
}  // namespace methods

enum class HttpVerb { kNone, kGet, kPost };  // kNone: on the ZeroMQ socket only

// Every field is documented here, once; a row of the table sets only what differs from these
// defaults, by name, in this order (C++20 designated initializers keep declaration order).
struct ControlMethod {
  std::string_view name;
  HttpVerb http_verb = HttpVerb::kNone;
  // "/<name>" as vLLM's server has it ("/v1/<name>" for the OpenAI-compatible routes); empty
  // for kNone.
  std::string_view http_route;
  // The query-string fields the route reads as params (vLLM's Query(...) arguments); a route
  // with none takes a JSON object body instead, as vLLM's POST routes do, or nothing (a GET).
  std::vector<std::string_view> query_fields;
  bool takes_json_body = false;
  // May take long (a transfer, generation, hashing, a drain): runs off the socket's thread.
  bool long_running = false;
  // Stops when its caller goes away (ZeroMQ disconnect, HTTP hang-up) instead of finishing.
  bool cancelled_when_caller_leaves = false;
  // Its start is quick and its run long (a generation): the ZeroMQ socket starts it on its own
  // thread and answers when the run ends, holding no thread meanwhile. Long-running too.
  bool answered_when_done = false;
  // vLLM's `operation` label in /metrics (init, start, update, ...); empty when not counted.
  // Counted methods are the weight-transfer calls, and run one at a time per worker.
  std::string_view metric_operation;
  // Checks the params before any work (and before any count): ValueError naming the field.
  void (*validate)(const nlohmann::json& params) = nullptr;
  // An OpenAI-compatible route: HTTP errors come in OpenAI's error object with vLLM's status
  // codes ({"error": {message, type, param, code}}), and completions may stream.
  bool openai = false;
  // A probe (a health check, a metrics scrape): answered over HTTP without the API key, as vLLM
  // exempts them, and by the HTTP server's own small pool, so a full pool never fails one.
  bool probe = false;
  // The HTTP body's media type where it is not JSON: the route answers the result's "text"
  // (/metrics: Prometheus' text format), the ZeroMQ method the result itself.
  std::string_view http_content_type = {};
  // Its params reach it with their keys in the order the client wrote them (a chat
  // conversation: a template's `tojson` writes a tool schema as it was sent); the frontends
  // parse its body again as nlohmann::ordered_json and hand both to the route.
  bool keeps_key_order = false;
  // With tensor parallelism, rank 0 runs it on every other rank too, under the same name
  // (worker/parallel/rank_methods.hpp): each rank's part of a weight-transfer session, and an
  // adapter read onto each rank's shard.
  bool runs_on_every_rank = false;
};

// Every method, in the order docs/architecture.md lists them.
const std::vector<ControlMethod>& control_methods();

// Whether a call of `m` with `params` holds a conversation (`messages`) whose key order a
// `keeps_key_order` method keeps: the frontends then read the body again as
// nlohmann::ordered_json. Without one, order shows nowhere, and a large body (60 MB to tokenize)
// is not parsed twice.
bool carries_conversation(const ControlMethod& m, const nlohmann::json& params);

// The method called `name`, or nullptr.
const ControlMethod* find_control_method(std::string_view name);
// The method called `name`; MethodNotFound ("Method not found: 'x'") when there is none.
const ControlMethod& control_method(std::string_view name);

// Every method's name, in table order.
std::vector<std::string_view> method_names();

// Validates `params` for `method` as the worker does before any work: MethodNotFound for a
// method the worker does not have, ValueError for bad params. Backend payloads (init_info,
// update_info) are checked only for their outer shape here; their engines parse the rest.
void validate_params(std::string_view method, const nlohmann::json& params);

// The table as JSON ({"methods": [{name, http_verb, http_route, query_fields, long_running,
// metric_operation}, ...]}): what `hotswap-worker --control-methods` prints for clients in
// other languages to build on.
nlohmann::json control_methods_json();

}  // namespace hotswap::protocol
