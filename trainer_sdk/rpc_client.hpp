// RpcClient: one JSON-RPC 2.0 connection to a worker's control socket (a ZeroMQ DEALER that
// frames like REQ, so the worker's ROUTER answers both alike). Every call has a timeout; a reply
// that arrives after its call timed out is recognised by its id and dropped, so the connection
// stays usable. An error reply is re-raised as its typed exception (ValueError, RuntimeError,
// TimeoutError, TransferError) with the worker's message.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
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

  // From key files (protocol/curve_key_file.hpp): the worker's public key, and this client's
  // secret key, whose public key is derived from it. ValueError naming a file that is wrong.
  static CurveKeys from_files(const std::filesystem::path& server_public_file,
                              const std::filesystem::path& secret_key_file);
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

// The field `field` of a worker's reply to `method`. A reply without it is a RuntimeError naming
// the worker, the method and the field, with the reply itself: a worker of another version, or
// something that is not a worker, answered.
const nlohmann::json& reply_field(const nlohmann::json& reply, std::string_view endpoint,
                                  std::string_view method, std::string_view field);
[[noreturn]] void throw_bad_reply_field(const nlohmann::json& reply, std::string_view endpoint,
                                        std::string_view method, std::string_view field,
                                        std::string_view expected);

// The same, read as T: a field of another type is a RuntimeError naming what was expected.
template <class T>
T reply_field_as(const nlohmann::json& reply, std::string_view endpoint, std::string_view method,
                 std::string_view field, std::string_view expected) {
  const nlohmann::json& value = reply_field(reply, endpoint, method, field);
  try {
    return value.get<T>();
  } catch (const nlohmann::json::exception&) {
    throw_bad_reply_field(reply, endpoint, method, field, expected);
  }
}

}  // namespace hotswap::trainer_sdk
