// ControlServer: the worker's ZeroMQ ROUTER socket speaking the pinned JSON-RPC 2.0 protocol.
// Any number of clients (REQ or DEALER) at once. Quick methods are answered on the socket
// thread; `generate` is handed to the scheduler and answered when it completes, holding no
// thread meanwhile; the other long calls (a transfer, hashing, a drain) run on a small fixed
// pool. Their replies come back through an eventfd, so health, weight_info, is_paused and
// generate keep being answered while an update_weights is in progress.
//
// Bounded everywhere: a frame over --max-request-bytes is refused (-32600) and one far beyond
// it is dropped by ZeroMQ before it is read; at most --max-queued-requests long calls wait for a
// thread (past it, -32002 overloaded); a client that disconnects cancels its generate requests.
// Optional CURVE authentication, which refuses unknown clients unless told otherwise.
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "protocol/jsonrpc.hpp"
#include "worker/event_fd.hpp"
#include "worker/frontends/bounded_thread_pool.hpp"
#include "worker/worker_options.hpp"
#include "worker/worker_service.hpp"

namespace hotswap::worker {

class ControlServer {
 public:
  // Long calls run on this many threads; the rest wait in a queue.
  static constexpr std::size_t kPoolThreads = 4;

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

  // One connection of the socket: its descriptor, and which of the connections that have had
  // that descriptor it is (the kernel reuses a descriptor as soon as its client hangs up, and a
  // trainer's client opens a connection per call).
  struct Connection {
    int fd = -1;
    std::uint64_t serial = 0;
    bool operator==(const Connection&) const = default;
  };

  void handle(std::vector<zmq::message_t> frames);
  // The live connection a request came on (by ZMQ_SRCFD), once the monitor's events that came
  // before it are read; nullopt where there is none to watch (inproc, or one already gone).
  std::optional<Connection> connection_of(int fd);
  // A method answered when its run ends (ControlMethod::answered_when_done): started here, on
  // the socket's thread, and answered from a pool thread when the run ends; a disconnect of
  // `connection` cancels it.
  void start_run(const protocol::RpcRequest& request, Reply reply,
                 std::optional<Connection> connection);
  void send(Reply reply);
  void complete(Reply reply);  // from any thread: queue it for the socket thread
  void flush();
  void on_monitor_event();
  void start_zap_handler(const std::string& authorized_keys_dir);
  // A call's reply frame; `ordered`: a conversation's params as the client ordered them
  // (protocol::carries_conversation); `gone`: set once the caller's connection is gone.
  std::string run_call(const protocol::RpcRequest& request,
                       const std::optional<nlohmann::ordered_json>& ordered = std::nullopt,
                       const std::shared_ptr<std::atomic<bool>>& gone = nullptr);

  WorkerService& service_;
  std::size_t max_request_bytes_;
  bool debug_;  // --log-level debug: one line per call
  bool warn_;   // every level but error: one line per failed call
  zmq::context_t context_;
  zmq::socket_t socket_;
  zmq::socket_t monitor_;  // the socket's ACCEPTED and DISCONNECTED events
  std::string endpoint_;
  EventFd completions_;
  std::mutex mutex_;
  std::deque<Reply> done_;
  // The socket thread's alone. The connections open now, by descriptor, each with its serial
  // (from the monitor's ACCEPTED); the runs started by start_run, and the connection each came
  // on: a client that disconnects cancels them, and only them.
  std::map<int, std::uint64_t> live_connections_;
  std::uint64_t connections_accepted_ = 0;
  std::vector<std::pair<Connection, std::weak_ptr<PendingAnswer>>> runs_;
  // Long calls on the pool that stop when their caller goes, by connection: set when it goes.
  std::vector<std::pair<Connection, std::weak_ptr<std::atomic<bool>>>> callers_;

  std::chrono::steady_clock::time_point dispatched_;  // the last call given to pool_
  BoundedThreadPool pool_;                            // the long calls'
  zmq::socket_t zap_;
  std::thread zap_thread_;
  std::atomic<bool> zap_stop_{false};
};

}  // namespace hotswap::worker
