// POST /v1/chat/completions: vLLM's ChatCompletionRequest (protocol::ChatCompletionParams, its
// conversation with the keys in the client's order) rendered by the model's chat template
// (ChatTemplates) and run as a completion, answered in chat's shapes, whole or streamed.
#include "protocol/control_methods.hpp"
#include "protocol/method_params.hpp"
#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"

namespace hotswap::worker {

void add_chat_completions_route(RouteTable& table, const ServingContext& context) {
  using protocol::ChatCompletionParams;
  table.add<ChatCompletionParams>(
      protocol::methods::kChatCompletions,
      [](const RouteCall& call) {
        auto params = ChatCompletionParams::from_json(
            call.ordered != nullptr ? *call.ordered : nlohmann::ordered_json(call.params));
        if (call.request_id) params.completion.request_id = call.request_id;
        refuse_stream_unless_served(params.completion.stream, call, "/v1/chat/completions",
                                    "a chat completion");
        return params;
      },
      [&context](ChatCompletionParams params, const RouteCall& call) {
        return answer_of(context.completions.start_chat(
            params, context.chat_templates, context.trust_request_chat_template, call.caller_gone));
      });
}

}  // namespace hotswap::worker
