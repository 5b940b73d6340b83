#include "trainer_sdk/rpc_client.hpp"

#include <zmq_addon.hpp>

#include "protocol/bounded_json.hpp"
#include "protocol/curve_key_file.hpp"
#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"

namespace hotswap::trainer_sdk {

using Clock = std::chrono::steady_clock;

CurveKeys CurveKeys::from_files(const std::filesystem::path& server_public_file,
                                const std::filesystem::path& secret_key_file) {
  CurveKeys keys;
  keys.server_public = protocol::read_curve_key_file(server_public_file);
  keys.secret_key = protocol::read_curve_key_file(secret_key_file);
  char public_key[41] = {};
  if (zmq_curve_public(public_key, keys.secret_key.c_str()) != 0) {
    // Any 32 bytes are a secret key: only a libzmq built without CURVE refuses here.
    throw protocol::RuntimeError(std::string("this libzmq cannot derive a CURVE public key (") +
                                 zmq_strerror(zmq_errno()) + "): it was built without CURVE");
  }
  keys.public_key = public_key;
  return keys;
}

RpcClient::RpcClient(std::string endpoint, std::chrono::milliseconds timeout,
                     const std::optional<CurveKeys>& curve, std::shared_ptr<zmq::context_t> context)
    : endpoint_(std::move(endpoint)),
      timeout_(timeout),
      context_(context ? std::move(context) : std::make_shared<zmq::context_t>(1)),
      socket_(*context_, zmq::socket_type::dealer) {
  socket_.set(zmq::sockopt::linger, 0);  // never block process exit on unsent requests
  if (curve) {
    socket_.set(zmq::sockopt::curve_serverkey, curve->server_public);
    socket_.set(zmq::sockopt::curve_publickey, curve->public_key);
    socket_.set(zmq::sockopt::curve_secretkey, curve->secret_key);
  }
  try {
    socket_.connect(endpoint_);
  } catch (const zmq::error_t& e) {
    throw protocol::ValueError("cannot connect to '" + endpoint_ + "': " + e.what());
  }
}

std::string RpcClient::receive(std::chrono::milliseconds timeout, std::string_view what,
                               const nlohmann::json* expected_id) {
  const auto deadline = Clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (left.count() <= 0 || zmq::poll(&item, 1, left) == 0) {
      throw protocol::TimeoutError("no reply from " + endpoint_ + " to " + std::string(what) +
                                   " within " + std::to_string(timeout.count()) + " ms");
    }
    std::vector<zmq::message_t> frames;
    if (!zmq::recv_multipart(socket_, std::back_inserter(frames))) continue;
    if (frames.empty()) continue;
    std::string body = frames.back().to_string();
    if (expected_id != nullptr) {
      auto doc = protocol::parse_bounded_json(body).value;
      // A late reply to an earlier call that timed out: drop it and keep waiting.
      if (doc.is_object() && doc.contains("id") && doc["id"] != *expected_id) continue;
    }
    return body;
  }
}

nlohmann::json RpcClient::call(std::string_view method, const nlohmann::json& params,
                               std::optional<std::chrono::milliseconds> timeout) {
  nlohmann::json id = next_id_++;
  std::string frame = protocol::make_request(id, method, params).dump();
  std::array<zmq::const_buffer, 2> parts{zmq::const_buffer(nullptr, 0), zmq::buffer(frame)};
  zmq::send_multipart(socket_, parts);
  std::string reply = receive(timeout.value_or(timeout_), "'" + std::string(method) + "'", &id);
  return protocol::parse_response(reply);
}

std::string RpcClient::call_raw(std::string_view frame,
                                std::optional<std::chrono::milliseconds> timeout) {
  std::array<zmq::const_buffer, 2> parts{zmq::const_buffer(nullptr, 0), zmq::buffer(frame)};
  zmq::send_multipart(socket_, parts);
  return receive(timeout.value_or(timeout_), "a raw request", nullptr);
}

namespace {

// The reply as it came, cut short: enough to see what answered.
std::string reply_text(const nlohmann::json& reply) {
  std::string text = reply.dump();
  if (text.size() > 300) text = text.substr(0, 300) + "...";
  return text;
}

}  // namespace

const nlohmann::json& reply_field(const nlohmann::json& reply, std::string_view endpoint,
                                  std::string_view method, std::string_view field) {
  if (!reply.is_object() || !reply.contains(field)) {
    throw protocol::RuntimeError("worker " + std::string(endpoint) + " answered " +
                                 std::string(method) + " without `" + std::string(field) +
                                 "` (its reply: " + reply_text(reply) +
                                 "): is that endpoint a hotswap worker of this version?");
  }
  return reply[std::string(field)];
}

void throw_bad_reply_field(const nlohmann::json& reply, std::string_view endpoint,
                           std::string_view method, std::string_view field,
                           std::string_view expected) {
  throw protocol::RuntimeError("worker " + std::string(endpoint) + " answered " +
                               std::string(method) + " with a `" + std::string(field) +
                               "` that is not " + std::string(expected) +
                               " (its reply: " + reply_text(reply) + ")");
}

}  // namespace hotswap::trainer_sdk
