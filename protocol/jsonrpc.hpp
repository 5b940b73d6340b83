// The JSON-RPC 2.0 envelope of hotswap's control plane (pinned in the architecture page).
// A request is one UTF-8 frame {"jsonrpc":"2.0","id":…,"method":…,"params":{…}}; the reply is
// {"jsonrpc":"2.0","id":…,"result":{…}} or {…,"error":{"code":…,"message":…,"data":{"type":…}}}.
// Every request gets a reply, a request without an id too (with "id": null), so that a REQ
// socket never waits forever.
#pragma once

#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"

namespace hotswap::protocol {

struct RpcRequest {
  nlohmann::json id;  // string, number or null
  std::string method;
  nlohmann::json params = nlohmann::json::object();  // always an object
};

// Thrown by parse_request: the error, and the request id when it could be read.
class RpcRequestError : public Error {
 public:
  RpcRequestError(ErrorKind kind, const std::string& message, nlohmann::json id)
      : Error(kind, message), id_(std::move(id)) {}
  const nlohmann::json& id() const { return id_; }

 private:
  nlohmann::json id_;
};

// Parses one request frame: ParseError for text that is not JSON, InvalidRequest for JSON
// that is not a JSON-RPC 2.0 request with an object (or absent) `params`.
RpcRequest parse_request(std::string_view frame);

nlohmann::json make_request(const nlohmann::json& id, std::string_view method,
                            nlohmann::json params = nlohmann::json::object());
nlohmann::json make_result(const nlohmann::json& id, nlohmann::json result);
nlohmann::json make_error(const nlohmann::json& id, ErrorKind kind, std::string_view message);

// The error reply for whatever a handler threw: an Error keeps its kind; anything else (a
// libtorch c10::Error, std::bad_alloc) is reported as a RuntimeError with its what().
nlohmann::json make_error(const nlohmann::json& id, const std::exception& error);

// For clients: the `result` of a reply frame, or the worker's error re-thrown as its typed
// exception. A reply that is not a JSON-RPC 2.0 response is a TransferError.
nlohmann::json parse_response(std::string_view frame);

}  // namespace hotswap::protocol
