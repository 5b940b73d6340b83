// The JSON-RPC 2.0 envelope of hotswap's control plane (pinned in docs/architecture.md).
// A request is one UTF-8 frame {"jsonrpc":"2.0","id":…,"method":…,"params":{…}}; the reply is
// {"jsonrpc":"2.0","id":…,"result":{…}} or {…,"error":{"code":…,"message":…,"data":{"type":…}}}.
// Every request gets a reply, a request without an id too (with "id": null), so that a REQ
// socket never waits forever.
#pragma once

#include <exception>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"

namespace hotswap::protocol {

// Requests larger than this are refused unanswered by the parser (-32600); the worker's
// --max-request-bytes sets its own. 64 MiB holds the update_info of a model with hundreds of
// thousands of tensors.
inline constexpr std::size_t kDefaultMaxRequestBytes = 64u << 20;

struct RpcRequest {
  nlohmann::json id;  // string, number or null
  // The id exactly as the request wrote it, for the reply: a client's 2^64 + 1 or 1.50 comes
  // back as sent, not as the double the parser made of it.
  std::string id_text = "null";
  std::string method;
  nlohmann::json params = nlohmann::json::object();  // always an object
};

// Thrown by parse_request: the error, and the request id when it could be read.
class RpcRequestError : public Error {
 public:
  RpcRequestError(ErrorKind kind, const std::string& message, nlohmann::json id,
                  std::string id_text = "null")
      : Error(kind, message), id_(std::move(id)), id_text_(std::move(id_text)) {}
  const nlohmann::json& id() const { return id_; }
  const std::string& id_text() const { return id_text_; }

 private:
  nlohmann::json id_;
  std::string id_text_;
};

// Parses one request frame: InvalidRequest for a frame over `max_bytes`, ParseError for text
// that is not JSON or nests deeper than kMaxJsonDepth, InvalidRequest for JSON that is not a
// JSON-RPC 2.0 request with an object (or absent) `params`.
RpcRequest parse_request(std::string_view frame, std::size_t max_bytes = kDefaultMaxRequestBytes);

nlohmann::json make_request(const nlohmann::json& id, std::string_view method,
                            nlohmann::json params = nlohmann::json::object());
nlohmann::json make_result(const nlohmann::json& id, nlohmann::json result);
nlohmann::json make_error(const nlohmann::json& id, ErrorKind kind, std::string_view message);

// The error reply for whatever a handler threw: an Error keeps its kind; anything else (a
// libtorch c10::Error, std::bad_alloc) is reported as a RuntimeError with its what().
nlohmann::json make_error(const nlohmann::json& id, const std::exception& error);

// The frame that carries `reply` (from make_result or make_error) back: its id written as
// `id_text`, the request's own spelling of it.
std::string reply_frame(const nlohmann::json& reply, std::string_view id_text);

// The serving side of one request, the same for every JSON-RPC server of the worker (the
// control socket, a tensor-parallel rank's channels): the reply frame to `request` is the
// result of `call`, or the error it threw as make_error reports it. `error` says which, with
// the message, for the server's log.
struct Answer {
  std::string frame;
  std::optional<std::string> error;
};
Answer answer_request(const RpcRequest& request, const std::function<nlohmann::json()>& call);
// The same from a request's frame: parse_request (within `max_bytes`), then answer_request; a
// frame that is not a request is answered with the error parse_request gave.
Answer answer_frame(std::string_view frame, std::size_t max_bytes,
                    const std::function<nlohmann::json(const RpcRequest&)>& call);

// For clients: the `result` of a reply frame, or the worker's error re-thrown as its typed
// exception. A reply that is not a JSON-RPC 2.0 response is a TransferError.
nlohmann::json parse_response(std::string_view frame);
// The same for a reply already parsed (`frame` only quoted in errors); a discarded document
// (what a failed parse gives) is malformed.
nlohmann::json result_of_response(const nlohmann::json& doc, std::string_view frame);

}  // namespace hotswap::protocol
