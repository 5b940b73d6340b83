#include "worker/frontends/control_server.hpp"

#include <zmq_addon.hpp>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include "worker/log_line.hpp"

#include "model_loader/intra_op_team.hpp"
#include "protocol/control_methods.hpp"
#include "protocol/curve_key_file.hpp"
#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"

namespace hotswap::worker {

namespace {

// How long the socket thread polls without sleeping after giving a call to the pool: about the
// time of a quick long-running call (start_weight_update, finish_weight_update: 0.1–0.2 ms of
// work); a slower one is waited for as before.
constexpr auto kAnswerSpin = std::chrono::microseconds(800);

bool is_loopback(const std::string& endpoint) {
  return endpoint.starts_with("tcp://127.") || endpoint.starts_with("tcp://localhost:") ||
         endpoint.starts_with("tcp://[::1]") || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

constexpr const char* kMonitorEndpoint = "inproc://hotswap-control-monitor";

}  // namespace

ControlServer::ControlServer(WorkerService& service, const WorkerOptions& options)
    : service_(service),
      max_request_bytes_(options.max_request_bytes),
      debug_(options.log_level == "debug"),
      warn_(options.log_level != "error"),
      context_(1),
      socket_(context_, zmq::socket_type::router),
      pool_(kPoolThreads, options.max_queued_requests) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::router_mandatory, 0);  // a client that went away is not an error
  // Frames a little over the limit are read and answered -32600; ZeroMQ drops the connection
  // of one far beyond it before buffering it, so no client can make the worker hold gigabytes.
  const auto hard_cap = static_cast<std::int64_t>(
      std::min<std::size_t>(max_request_bytes_, std::size_t(1) << 61) * 2 + (1 << 20));
  socket_.set(zmq::sockopt::maxmsgsize, hard_cap);
  const bool curve = !options.curve_secret_key_file.empty();
  if (curve) {
    if (options.curve_authorized_keys.empty() && !options.curve_allow_any_client) {
      throw protocol::ValueError(
          "--curve-secret-key-file without --curve-authorized-keys would let any client key "
          "connect; name the authorized keys' directory, or pass --curve-allow-any-client to "
          "encrypt without authenticating clients");
    }
    std::string secret = protocol::read_curve_key_file(options.curve_secret_key_file);
    if (!options.curve_authorized_keys.empty()) start_zap_handler(options.curve_authorized_keys);
    socket_.set(zmq::sockopt::curve_server, 1);
    socket_.set(zmq::sockopt::curve_secretkey, secret);
  } else if (!is_loopback(options.control)) {
    LogLine{} << "hotswap-worker: warning: the control socket " << options.control
              << " is reachable beyond this host without CURVE authentication; anyone who can "
                 "connect can replace the weights (see --curve-secret-key-file)\n";
  }
  // Connections and disconnections, to cancel the generate requests of clients that went away.
  if (zmq_socket_monitor(socket_.handle(), kMonitorEndpoint,
                         ZMQ_EVENT_ACCEPTED | ZMQ_EVENT_DISCONNECTED) != 0) {
    throw protocol::RuntimeError(std::string("cannot monitor the control socket: ") +
                                 zmq_strerror(zmq_errno()));
  }
  monitor_ = zmq::socket_t(context_, zmq::socket_type::pair);
  monitor_.set(zmq::sockopt::linger, 0);
  monitor_.connect(kMonitorEndpoint);
  try {
    socket_.bind(options.control);
  } catch (const zmq::error_t& e) {
    throw protocol::RuntimeError("cannot bind the control socket to " + options.control + ": " +
                                 e.what());
  }
  endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
}

ControlServer::~ControlServer() {
  pool_.stop();
  zmq_socket_monitor(socket_.handle(), nullptr, 0);
  zap_stop_ = true;
  if (zap_thread_.joinable()) zap_thread_.join();
}

// ZeroMQ's authentication protocol (ZAP, RFC 27): the library asks this handler whether a CURVE
// client's public key may connect. Only keys found in the authorized directory may.
void ControlServer::start_zap_handler(const std::string& authorized_keys_dir) {
  std::set<std::string> allowed;
  for (const auto& entry : std::filesystem::directory_iterator(authorized_keys_dir)) {
    if (!entry.is_regular_file()) continue;
    std::string z85 = protocol::read_curve_key_file(entry.path());
    std::string raw(32, '\0');
    if (zmq_z85_decode(reinterpret_cast<std::uint8_t*>(raw.data()), z85.c_str()) == nullptr) {
      throw protocol::ValueError("CURVE key file " + entry.path().string() + " is not valid Z85");
    }
    allowed.insert(raw);
  }
  zap_ = zmq::socket_t(context_, zmq::socket_type::rep);
  zap_.bind("inproc://zeromq.zap.01");
  zap_thread_ = std::thread([this, allowed] {
    while (!zap_stop_) {
      zmq::pollitem_t item{zap_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) == 0) continue;
      std::vector<zmq::message_t> request;
      if (!zmq::recv_multipart(zap_, std::back_inserter(request)) || request.size() < 7) continue;
      bool ok = request[5].to_string() == "CURVE" && allowed.contains(request[6].to_string());
      std::array<zmq::const_buffer, 6> reply{
          zmq::str_buffer("1.0"),
          zmq::buffer(request[1].data(), request[1].size()),
          ok ? zmq::str_buffer("200") : zmq::str_buffer("400"),
          ok ? zmq::str_buffer("OK") : zmq::str_buffer("client key not authorized"),
          zmq::str_buffer(""),
          zmq::str_buffer("")};
      zmq::send_multipart(zap_, reply);
    }
  });
}

void ControlServer::send(Reply reply) {
  std::vector<zmq::message_t> frames = std::move(reply.envelope);
  frames.emplace_back(reply.body);
  zmq::send_multipart(socket_, frames, zmq::send_flags::dontwait);
}

void ControlServer::complete(Reply reply) {
  {
    std::lock_guard lock(mutex_);
    done_.push_back(std::move(reply));
  }
  completions_.notify();
}

void ControlServer::flush() {
  completions_.drain();
  std::deque<Reply> ready;
  {
    std::lock_guard lock(mutex_);
    ready.swap(done_);
  }
  for (auto& r : ready)
    send(std::move(r));
}

std::string ControlServer::run_call(const protocol::RpcRequest& request,
                                    const std::optional<nlohmann::ordered_json>& ordered,
                                    const std::shared_ptr<std::atomic<bool>>& gone) {
  auto start = std::chrono::steady_clock::now();
  std::function<bool()> caller_gone;
  if (gone) caller_gone = [gone] { return gone->load(); };
  auto answer = protocol::answer_request(request, [&] {
    RouteCall call(request.params);
    call.ordered = ordered ? &*ordered : nullptr;
    call.caller_gone = caller_gone;
    return service_.call(request.method, call);
  });
  if (debug_ || (warn_ && answer.error)) {
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    LogLine{} << "hotswap-worker: " << request.method << " " << ms << " ms "
              << (answer.error ? "error: " + *answer.error : std::string("ok"));
  }
  return std::move(answer.frame);
}

std::optional<ControlServer::Connection> ControlServer::connection_of(int fd) {
  if (fd < 0) return std::nullopt;
  // A descriptor is reused as soon as its client hangs up, and the event of that hang-up can
  // still wait in the monitor while a request of the next connection on the descriptor is read
  // (this thread reads requests in a loop): read later, it cancelled the new request, which came
  // back aborted with no tokens (7 of 150 generate calls, each on a connection of its own, while
  // other clients came and went). Every event emitted before this request arrived is read first.
  on_monitor_event();
  auto live = live_connections_.find(fd);
  // Gone already: the request runs to its end, and its reply goes nowhere.
  if (live == live_connections_.end()) return std::nullopt;
  return Connection{fd, live->second};
}

void ControlServer::start_run(const protocol::RpcRequest& request, Reply reply,
                              std::optional<Connection> connection) {
  // std::function needs a copyable callable; the routing frames are move-only.
  auto envelope = std::make_shared<std::vector<zmq::message_t>>(std::move(reply.envelope));
  const auto id = request.id;
  const auto id_text = request.id_text;
  const std::string method = request.method;
  std::shared_ptr<PendingAnswer> run;
  try {
    RouteAnswer answered = service_.answer(method, RouteCall(request.params));
    if (!answered.pending) {  // answered at once
      send(Reply{std::move(*envelope),
                 protocol::reply_frame(protocol::make_result(id, answered.json_body()), id_text)});
      return;
    }
    run = std::move(answered.pending);
  } catch (const std::exception& e) {
    // Refused at once (bad params, dirty model, full queue): nothing was queued.
    send(Reply{std::move(*envelope), protocol::reply_frame(protocol::make_error(id, e), id_text)});
    if (warn_) LogLine{} << "hotswap-worker: " << method << " error: " << e.what();
    return;
  }
  // Weakly: the run owns the callback, which must not keep the run alive.
  std::weak_ptr<PendingAnswer> weak = run;
  run->when_done([this, envelope, weak, id, id_text, method] {
    // The run ended on the scheduler's thread, under its lock: a reply that takes work (a
    // completion's every logprob token decoded) is built on a pool thread, so that generation
    // does not wait for it; a quick one here, so that it never waits behind the pool's long calls.
    auto ended = weak.lock();
    const bool quick = ended && ended->quick_response();
    std::function<void()> answer = [this, envelope, run = std::move(ended), id, id_text, method] {
      Reply out{std::move(*envelope), {}};
      try {
        if (!run) throw protocol::RuntimeError("the " + method + " run was dropped");
        out.body = protocol::reply_frame(protocol::make_result(id, nlohmann::json(run->response())),
                                         id_text);
      } catch (const std::exception& e) {
        out.body = protocol::reply_frame(protocol::make_error(id, e), id_text);
        if (warn_) LogLine{} << "hotswap-worker: " << method << " error: " << e.what();
      }
      complete(std::move(out));
    };
    if (quick || !pool_.try_submit(answer)) answer();  // a full pool: here rather than lost
  });
  if (connection) {
    std::erase_if(runs_, [](const auto& entry) { return entry.second.expired(); });
    runs_.emplace_back(*connection, run);
  }
}

void ControlServer::handle(std::vector<zmq::message_t> frames) {
  if (frames.size() < 2) return;  // no routing identity: nothing to answer
  Reply reply;
  // The descriptor of the connection this frame came on (-1 where there is none, inproc).
  const int fd = frames.back().get(ZMQ_SRCFD);
  std::string body = frames.back().to_string();
  frames.pop_back();
  reply.envelope = std::move(frames);

  protocol::RpcRequest request;
  try {
    request = protocol::parse_request(body, max_request_bytes_);
  } catch (const protocol::RpcRequestError& e) {
    reply.body = protocol::reply_frame(protocol::make_error(e.id(), e), e.id_text());
    send(std::move(reply));
    if (warn_) LogLine{} << "hotswap-worker: refused a request: " << e.what();
    return;
  }
  const protocol::ControlMethod* method = protocol::find_control_method(request.method);
  // A conversation's params again, from the frame, their keys in the order written (it parsed
  // within the bounds above).
  std::optional<nlohmann::ordered_json> ordered;
  if (method != nullptr && protocol::carries_conversation(*method, request.params)) {
    auto frame = nlohmann::ordered_json::parse(body);
    auto params = frame.find("params");
    ordered = params != frame.end() ? std::move(*params) : nlohmann::ordered_json::object();
  }
  body.clear();
  // A generation holds no thread while the scheduler works on it, and stops when its connection
  // goes. (A chat completion renders its template first, which may take seconds: it runs on the
  // pool like the other long calls, answered whole, holding a thread, never on this thread.)
  if (method != nullptr && method->answered_when_done) {
    start_run(request, std::move(reply), connection_of(fd));
    return;
  }
  // Short calls, and unknown methods (a MethodNotFound at once), answer on this thread.
  if (method == nullptr || !method->long_running) {
    reply.body = run_call(request);
    send(std::move(reply));
    return;
  }
  auto envelope = std::make_shared<std::vector<zmq::message_t>>(std::move(reply.envelope));
  // A call that stops when its caller goes (a chat completion, a tokenize) learns of it through
  // a flag the socket thread sets when the connection's hang-up is read.
  std::shared_ptr<std::atomic<bool>> gone;
  if (method->cancelled_when_caller_leaves) {
    if (auto connection = connection_of(fd)) {
      std::erase_if(callers_, [](const auto& caller) { return caller.second.expired(); });
      gone = std::make_shared<std::atomic<bool>>(false);
      callers_.emplace_back(*connection, gone);
    }
  }
  std::function<void()> task = [this, request, envelope, ordered = std::move(ordered), gone] {
    complete(Reply{std::move(*envelope), run_call(request, ordered, gone)});
  };
  const bool queued = pool_.try_submit(task);
  dispatched_ = std::chrono::steady_clock::now();
  if (!queued) {
    protocol::OverloadedError overloaded(
        "the worker is overloaded: " + std::to_string(pool_.max_queued()) +
        " calls are already waiting " + "for one of its " + std::to_string(kPoolThreads) +
        " threads (--max-queued-requests); retry later");
    send(Reply{
        std::move(*envelope),
        protocol::reply_frame(protocol::make_error(request.id, overloaded), request.id_text)});
  }
}

void ControlServer::on_monitor_event() {
  while (true) {
    std::vector<zmq::message_t> event;
    if (!zmq::recv_multipart(monitor_, std::back_inserter(event), zmq::recv_flags::dontwait)) {
      return;
    }
    // Frame one: the event (uint16) and its value (uint32: the connection's descriptor).
    if (event.empty() || event[0].size() < 6) continue;
    std::uint16_t kind = 0;
    std::uint32_t value = 0;
    std::memcpy(&kind, event[0].data(), sizeof kind);
    std::memcpy(&value, static_cast<const char*>(event[0].data()) + 2, sizeof value);
    const auto fd = static_cast<int>(value);
    if (kind == ZMQ_EVENT_ACCEPTED) {
      live_connections_[fd] = ++connections_accepted_;
      continue;
    }
    if (kind != ZMQ_EVENT_DISCONNECTED) continue;
    auto live = live_connections_.find(fd);
    if (live == live_connections_.end()) continue;
    const Connection gone{fd, live->second};
    live_connections_.erase(live);
    std::erase_if(callers_, [&](const auto& caller) {
      auto flag = caller.second.lock();
      if (flag && caller.first == gone) *flag = true;
      return !flag || caller.first == gone;
    });
    std::erase_if(runs_, [&](const auto& entry) {
      auto run = entry.second.lock();
      if (run && entry.first == gone) run->cancel();  // its reply still comes, and goes nowhere
      return !run || entry.first == gone;
    });
  }
}

void ControlServer::run(const EventFd& stop) {
  while (!service_.shutdown_requested()) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, completions_.fd(), ZMQ_POLLIN, 0},
                               {nullptr, stop.fd(), ZMQ_POLLIN, 0},
                               {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    try {
      // Right after a call went to the pool, this thread polls without sleeping for a while: a
      // quick call's answer then leaves without waiting for this thread to be woken (the
      // four-call round on the VM 0.84–0.99 → 0.67–0.76 ms, three runs each).
      auto polled = 0;
      while (std::chrono::steady_clock::now() - dispatched_ < kAnswerSpin &&
             (polled = zmq::poll(items, 4, std::chrono::milliseconds(0))) == 0) {
      }
      if (polled == 0) zmq::poll(items, 4, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal; its eventfd is read on the next round
      throw;
    }
    if (items[2].revents & ZMQ_POLLIN) break;
    if (items[1].revents & ZMQ_POLLIN) flush();
    if (items[3].revents & ZMQ_POLLIN) on_monitor_event();
    if (items[0].revents & ZMQ_POLLIN) {
      while (true) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          break;
        }
        // Whatever one request does, the loop serves the next: an error that escapes the
        // handling of a request (say, a reply that cannot be built) costs that request only.
        try {
          handle(std::move(frames));
        } catch (const std::exception& e) {
          LogLine{} << "hotswap-worker: could not answer a request: " << e.what();
        }
      }
      // Short calls answer on this thread: none keeps a team here (intra_op_team.hpp).
      model_loader::release_intra_op_team();
    }
  }
  // Calls in progress finish and are answered; generate requests end as aborted; nothing new
  // is taken.
  pool_.stop();
  service_.stop_generation();
  flush();
}

}  // namespace hotswap::worker
