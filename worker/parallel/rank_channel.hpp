// RankChannel: rank 0's end of one internal channel to another tensor-parallel rank of the same
// worker: JSON-RPC over a ZeroMQ DEALER socket on loopback, one request in flight at a time.
// send() and receive() are split so that rank 0 can start a step on every rank, run its own
// share, and only then collect the answers; call() is the two together. Every wait is bounded,
// and a rank that does not answer in time is a TimeoutError naming it (the channel is then
// broken: a late answer could be taken for the next request's, so every later call fails).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

namespace hotswap::worker {

class RankChannel {
 public:
  RankChannel(zmq::context_t& context, const std::string& endpoint, int rank);

  // Sends one request; its answer must be received before the next is sent.
  void send(std::string_view method, const nlohmann::json& params);
  // The answer's result, or the other rank's error re-thrown as its protocol error kind.
  // `give_up`, asked every 100 ms, ends the wait early (a TransferError): the rank is known
  // to be gone, and its answer will not come.
  nlohmann::json receive(std::chrono::milliseconds timeout,
                         const std::function<bool()>& give_up = {});
  nlohmann::json call(std::string_view method, const nlohmann::json& params,
                      std::chrono::milliseconds timeout);

  int rank() const { return rank_; }

 private:
  zmq::socket_t socket_;
  int rank_;
  std::uint64_t next_id_ = 1;
  std::string pending_;  // the method awaiting an answer, for the messages
  bool broken_ = false;
};

}  // namespace hotswap::worker
