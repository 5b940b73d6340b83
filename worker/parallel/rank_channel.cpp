#include "worker/parallel/rank_channel.hpp"

#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"

namespace hotswap::worker {

RankChannel::RankChannel(zmq::context_t& context, const std::string& endpoint, int rank)
    : socket_(context, zmq::socket_type::dealer), rank_(rank) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.connect(endpoint);
}

void RankChannel::send(std::string_view method, const nlohmann::json& params) {
  if (broken_) {
    throw protocol::TransferError("tensor-parallel rank " + std::to_string(rank_) +
                                  " stopped answering earlier; the worker cannot use it again");
  }
  const std::string frame = protocol::make_request(next_id_++, method, params).dump();
  // A DEALER queues while the peer is connected; a send that cannot be queued at once means
  // the rank went away.
  socket_.send(zmq::message_t(), zmq::send_flags::sndmore);  // the empty delimiter a ROUTER reads
  if (!socket_.send(zmq::buffer(frame), zmq::send_flags::dontwait)) {
    broken_ = true;
    throw protocol::TransferError("could not send " + std::string(method) +
                                  " to tensor-parallel rank " + std::to_string(rank_));
  }
  pending_ = method;
}

nlohmann::json RankChannel::receive(std::chrono::milliseconds timeout,
                                    const std::function<bool()>& give_up) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const std::uint64_t expected = next_id_ - 1;
  zmq::message_t body;
  nlohmann::json reply;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (left.count() <= 0) {
      broken_ = true;
      throw protocol::TimeoutError("tensor-parallel rank " + std::to_string(rank_) +
                                   " did not answer " + pending_ + " within " +
                                   std::to_string(timeout.count()) + " ms");
    }
    if (zmq::poll(&item, 1, std::min(left, std::chrono::milliseconds(100))) == 0) {
      if (give_up && give_up()) {
        broken_ = true;
        throw protocol::TransferError("tensor-parallel rank " + std::to_string(rank_) +
                                      " went away before answering " + pending_);
      }
      continue;
    }
    zmq::message_t delimiter;
    (void)socket_.recv(delimiter);
    if (delimiter.more()) {
      (void)socket_.recv(body);
    } else {
      body = std::move(delimiter);
    }
    // The answer to an earlier request whose wait was given up (its sender failed part-way)
    // is dropped: only this request's id is its answer.
    reply = nlohmann::json::parse(body.to_string_view(), nullptr, false);
    if (reply.is_object() && reply.value("id", nlohmann::json()) == expected) break;
  }
  try {
    return protocol::result_of_response(reply, body.to_string_view());
  } catch (const protocol::Error& e) {
    // The other rank's own words, said to be its.
    protocol::throw_error(e.kind(),
                          "tensor-parallel rank " + std::to_string(rank_) + ": " + e.what());
  }
}

nlohmann::json RankChannel::call(std::string_view method, const nlohmann::json& params,
                                 std::chrono::milliseconds timeout) {
  send(method, params);
  return receive(timeout);
}

}  // namespace hotswap::worker
