// POST /tokenize and /detokenize: vLLM's TokenizeRequest (a prompt, or a conversation rendered as
// the chat route renders it) answered with its TokenizeResponse, and its DetokenizeRequest with
// the text. Both need the model directory's tokenizer.json.
#include <limits>
#include <variant>

#include "protocol/control_methods.hpp"
#include "protocol/method_params.hpp"
#include "worker/routes/route_table.hpp"
#include "worker/routes/serving_context.hpp"

namespace hotswap::worker {
namespace {

using nlohmann::json;
// vLLM's TokenizeCompletionRequest or TokenizeChatRequest, told apart by `messages`.
using TokenizeRequest = std::variant<protocol::TokenizeParams, protocol::TokenizeChatParams>;

TokenizeRequest parse_tokenize(const RouteCall& call) {
  if (!call.params.contains("messages")) return protocol::TokenizeParams::from_json(call.params);
  return protocol::TokenizeChatParams::from_json(
      call.ordered != nullptr ? *call.ordered : nlohmann::ordered_json(call.params));
}

// vLLM's TokenizeResponse for `text`. No context limit, as vLLM's; a client that leaves (or a
// worker that stops) ends the work.
json tokenize_text(const ServingContext& context, const std::string& text, bool add_special_tokens,
                   bool return_token_strs, const std::function<bool()>& caller_gone) {
  const auto& tokenizer = context.require_tokenizer();
  const auto ids = *tokenizer.encode_within(text, add_special_tokens,
                                            std::numeric_limits<std::size_t>::max(), caller_gone);
  json strs = nullptr;
  if (return_token_strs) {
    strs = json::array();
    for (auto id : ids)
      strs.push_back(*tokenizer.id_to_token(id));
  }
  return {{"count", ids.size()},
          {"max_model_len", context.config.max_position_embeddings},
          {"tokens", ids},
          {"token_strs", strs}};
}

}  // namespace

void add_tokenize_routes(RouteTable& table, const ServingContext& context) {
  table.add<TokenizeRequest>(
      protocol::methods::kTokenize, parse_tokenize,
      [&context](TokenizeRequest request, const RouteCall& call) {
        if (auto* prompt = std::get_if<protocol::TokenizeParams>(&request)) {
          return RouteAnswer::now(tokenize_text(context, prompt->prompt, prompt->add_special_tokens,
                                                prompt->return_token_strs, call.caller_gone));
        }
        const auto& chat = std::get<protocol::TokenizeChatParams>(request);
        refuse_untrusted_template(chat.conversation, context.trust_request_chat_template);
        return RouteAnswer::now(
            tokenize_text(context, context.chat_templates.render(chat.conversation),
                          chat.add_special_tokens, chat.return_token_strs, call.caller_gone));
      });
  table.add<protocol::DetokenizeParams>(
      protocol::methods::kDetokenize,
      [](const RouteCall& call) { return protocol::DetokenizeParams::from_json(call.params); },
      [&context](protocol::DetokenizeParams request, const RouteCall&) {
        return RouteAnswer::now(
            json{{"prompt", context.require_tokenizer().decode(request.tokens)}});
      });
}

}  // namespace hotswap::worker
