// RpcClient: one JSON-RPC 2.0 connection to a worker's control socket (a ZeroMQ DEALER that
// frames like REQ, so the worker's ROUTER answers both alike). Every call has a timeout; a reply
// that arrives after its call timed out is recognised by its id and dropped, so the connection
// stays usable. An error reply is re-raised as its typed exception (ValueError, RuntimeError,
// TimeoutError, TransferError) with the worker's message.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace hotswap::trainer_sdk {

// A client's CURVE identity and the server key it trusts, each a 40-character Z85 string.
struct CurveKeys {
  std::string server_public;
  std::string public_key;
  std::string secret_key;
};

class RpcClient {
 public:
  // `context` may be shared between clients (ZeroMQ contexts are thread-safe); a fresh one is
  // made when it is null.
  RpcClient(std::string endpoint, std::chrono::milliseconds timeout,
            const std::optional<CurveKeys>& curve = std::nullopt,
            std::shared_ptr<zmq::context_t> context = nullptr);

  nlohmann::json call(std::string_view method,
                      const nlohmann::json& params = nlohmann::json::object(),
                      std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  // Sends raw bytes and returns the raw reply frame: for tests of malformed requests.
  std::string call_raw(std::string_view frame,
                       std::optional<std::chrono::milliseconds> timeout = std::nullopt);

  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string receive(std::chrono::milliseconds timeout, std::string_view what,
                      const nlohmann::json* expected_id);

  std::string endpoint_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<zmq::context_t> context_;
  zmq::socket_t socket_;
  std::uint64_t next_id_ = 1;
};

}  // namespace hotswap::trainer_sdk
