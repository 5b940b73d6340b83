// POST /v1/completions: vLLM's CompletionRequest (protocol::CompletionParams) answered with its
// CompletionResponse, or streamed as its chunks in server-sent events (`stream`, HTTP only).
#include "protocol/control_methods.hpp"
#include "protocol/method_params.hpp"
#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"

namespace hotswap::worker {

void add_completions_route(RouteTable& table, const ServingContext& context) {
  using protocol::CompletionParams;
  table.add<CompletionParams>(
      protocol::methods::kCompletions,
      [](const RouteCall& call) {
        auto params = CompletionParams::from_json(call.params);
        if (call.request_id) params.request_id = call.request_id;
        refuse_stream_unless_served(params.stream, call, "/v1/completions", "a completion");
        return params;
      },
      [&context](CompletionParams params, const RouteCall& call) {
        return answer_of(context.completions.start(std::move(params), call.caller_gone));
      });
}

}  // namespace hotswap::worker
