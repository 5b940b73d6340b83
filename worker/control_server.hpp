// ControlServer: the worker's ZeroMQ ROUTER socket speaking the pinned JSON-RPC 2.0 protocol.
// Any number of clients (REQ or DEALER) at once. Quick methods are answered on the socket
// thread; long ones (a transfer, generation) run on threads of their own and their replies are
// handed back through an eventfd, so health, weight_info, is_paused and generate keep being
// answered while an update_weights is in progress. Optional CURVE authentication.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "worker/event_fd.hpp"
#include "worker/worker_options.hpp"
#include "worker/worker_service.hpp"

namespace hotswap::worker {

class ControlServer {
 public:
  ControlServer(WorkerService& service, const WorkerOptions& options);
  ~ControlServer();

  // The bound endpoint (a `tcp://host:*` wildcard resolved to its port).
  const std::string& endpoint() const { return endpoint_; }

  // Serves until `stop` is notified or a client calls `shutdown`; then waits for the calls in
  // progress to finish.
  void run(const EventFd& stop);

 private:
  struct Reply {
    std::vector<zmq::message_t> envelope;  // routing identity (+ empty delimiter)
    std::string body;
  };

  void handle(std::vector<zmq::message_t> frames);
  void send(Reply reply);
  void start_zap_handler(const std::string& authorized_keys_dir);

  WorkerService& service_;
  bool debug_;  // --log-level debug: one line per call
  bool warn_;   // every level but error: one line per failed call
  zmq::context_t context_;
  zmq::socket_t socket_;
  std::string endpoint_;
  EventFd completions_;
  std::mutex mutex_;
  std::deque<Reply> done_;
  // Long calls run on pooled threads that live as long as the server: a fresh thread per call
  // would pay libtorch's per-thread set-up (its OpenMP team) on every update. The pool grows
  // when every thread is busy (a generate or a transfer may block one for long).
  void submit(std::function<void()> task);
  void stop_pool();
  std::mutex pool_mutex_;
  std::condition_variable pool_wake_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> pool_;
  std::size_t idle_ = 0;
  bool pool_stop_ = false;
  zmq::socket_t zap_;
  std::thread zap_thread_;
  std::atomic<bool> zap_stop_{false};
};

}  // namespace hotswap::worker
