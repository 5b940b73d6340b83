#include "protocol/jsonrpc.hpp"

#include "protocol/bounded_json.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {

using nlohmann::json;

RpcRequest parse_request(std::string_view frame, std::size_t max_bytes) {
  auto parsed = parse_bounded_json(frame, JsonBounds{.max_bytes = max_bytes});
  switch (parsed.refusal) {
    case JsonRefusal::kNone:
      break;
    case JsonRefusal::kTooLarge:
      throw RpcRequestError(ErrorKind::kInvalidRequest,
                            "Invalid Request: the request " + parsed.reason +
                                " bytes this worker accepts (--max-request-bytes)",
                            nullptr);
    default:
      throw RpcRequestError(ErrorKind::kParseError, "Parse error: the request " + parsed.reason,
                            nullptr);
  }
  json& doc = parsed.value;
  if (!doc.is_object()) {
    throw RpcRequestError(ErrorKind::kInvalidRequest,
                          "Invalid Request: expected a JSON object, got " + describe_json(doc),
                          nullptr);
  }
  RpcRequest request;
  if (auto it = doc.find("id"); it != doc.end()) {
    if (!it->is_string() && !it->is_number() && !it->is_null()) {
      throw RpcRequestError(
          ErrorKind::kInvalidRequest,
          "Invalid Request: `id` must be a string, a number or null, got " + describe_json(*it),
          nullptr);
    }
    request.id = *it;
    request.id_text = it->dump();
    if (it->is_number()) {
      if (auto raw = top_level_member_text(frame, "id")) request.id_text = std::string(*raw);
    }
  }
  auto invalid = [&](const std::string& why) {
    return RpcRequestError(ErrorKind::kInvalidRequest, "Invalid Request: " + why, request.id,
                           request.id_text);
  };
  auto version = doc.find("jsonrpc");
  if (version == doc.end() || *version != "2.0") {
    throw invalid("`jsonrpc` must be \"2.0\"");
  }
  auto method = doc.find("method");
  if (method == doc.end() || !method->is_string()) {
    throw invalid("`method` must be a string");
  }
  request.method = method->get<std::string>();
  if (auto params = doc.find("params"); params != doc.end() && !params->is_null()) {
    if (!params->is_object()) {
      throw invalid("`params` must be an object (vLLM's request body), got " +
                    describe_json(*params));
    }
    request.params = *params;
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "jsonrpc" && key != "id" && key != "method" && key != "params") {
      throw invalid("unexpected member `" + key + "`");
    }
  }
  return request;
}

json make_request(const json& id, std::string_view method, json params) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"method", method}, {"params", std::move(params)}};
}

json make_result(const json& id, json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

json make_error(const json& id, ErrorKind kind, std::string_view message) {
  return {{"jsonrpc", "2.0"},
          {"id", id},
          {"error",
           {{"code", error_code(kind)},
            {"message", message},
            {"data", {{"type", error_type_name(kind)}}}}}};
}

json make_error(const json& id, const std::exception& error) {
  if (const auto* typed = dynamic_cast<const Error*>(&error)) {
    return make_error(id, typed->kind(), typed->what());
  }
  return make_error(id, ErrorKind::kRuntimeError, error.what());
}

std::string reply_frame(const json& reply, std::string_view id_text) {
  json rest = reply;
  rest.erase("id");
  // An error message may quote bytes that are not UTF-8 (a hostile payload's): replaced, so
  // that every error can be sent back.
  std::string body = rest.dump(-1, ' ', false, json::error_handler_t::replace);  // "{...}"
  std::string out = "{\"id\":";
  out += id_text;
  out += body.size() > 2 ? "," + body.substr(1) : std::string("}");
  return out;
}

json parse_response(std::string_view frame) {
  return result_of_response(parse_bounded_json(frame).value, frame);
}

json result_of_response(const json& doc, std::string_view frame) {
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("jsonrpc") ||
      doc.at("jsonrpc") != "2.0") {
    throw TransferError("malformed JSON-RPC reply: " + std::string(frame.substr(0, 200)));
  }
  if (auto result = doc.find("result"); result != doc.end()) return *result;
  auto error = doc.find("error");
  if (error == doc.end() || !error->is_object()) {
    throw TransferError("JSON-RPC reply has neither `result` nor `error`: " +
                        std::string(frame.substr(0, 200)));
  }
  // Read field by field: a reply is outside input too, and a wrong-typed field must not turn
  // into a JSON library error.
  int code = kWrongStateCode;
  if (auto c = error->find("code"); c != error->end() && c->is_number_integer()) {
    code = static_cast<int>(c->get<std::int64_t>());
  }
  std::string message, type;
  if (auto m = error->find("message"); m != error->end() && m->is_string()) message = *m;
  if (auto data = error->find("data"); data != error->end() && data->is_object()) {
    if (auto t = data->find("type"); t != data->end() && t->is_string()) type = *t;
  }
  throw_error(error_kind_from_reply(code, type), message);
}

Answer answer_request(const RpcRequest& request, const std::function<nlohmann::json()>& call) {
  try {
    return {reply_frame(make_result(request.id, call()), request.id_text), std::nullopt};
  } catch (const std::exception& e) {
    return {reply_frame(make_error(request.id, e), request.id_text), std::string(e.what())};
  }
}

Answer answer_frame(std::string_view frame, std::size_t max_bytes,
                    const std::function<nlohmann::json(const RpcRequest&)>& call) {
  RpcRequest request;
  try {
    request = parse_request(frame, max_bytes);
  } catch (const RpcRequestError& e) {
    return {reply_frame(make_error(e.id(), e), e.id_text()), std::string(e.what())};
  }
  return answer_request(request, [&] { return call(request); });
}

}  // namespace hotswap::protocol
