#include "worker/control_server.hpp"

#include <zmq_addon.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>

#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"

namespace hotswap::worker {
namespace {

bool is_loopback(const std::string& endpoint) {
  return endpoint.starts_with("tcp://127.") || endpoint.starts_with("tcp://localhost:") ||
         endpoint.starts_with("tcp://[::1]") || endpoint.starts_with("ipc://") ||
         endpoint.starts_with("inproc://");
}

std::string read_key_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string key;
  in >> key;
  if (key.size() != 40) {
    throw protocol::ValueError("CURVE key file " + path.string() +
                               " must hold a 40-character Z85 key");
  }
  return key;
}

}  // namespace

ControlServer::ControlServer(WorkerService& service, const WorkerOptions& options)
    : service_(service),
      debug_(options.log_level == "debug"),
      warn_(options.log_level != "error"),
      context_(1),
      socket_(context_, zmq::socket_type::router) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.set(zmq::sockopt::router_mandatory, 0);  // a client that went away is not an error
  const bool curve = !options.curve_secret_key_file.empty();
  if (curve) {
    std::string secret = read_key_file(options.curve_secret_key_file);
    if (!options.curve_authorized_keys.empty()) start_zap_handler(options.curve_authorized_keys);
    socket_.set(zmq::sockopt::curve_server, 1);
    socket_.set(zmq::sockopt::curve_secretkey, secret);
  } else if (!is_loopback(options.control)) {
    std::cerr << "hotswap-worker: warning: the control socket " << options.control
              << " is reachable beyond this host without CURVE authentication; anyone who can "
                 "connect can replace the weights (see --curve-secret-key-file)\n";
  }
  try {
    socket_.bind(options.control);
  } catch (const zmq::error_t& e) {
    throw protocol::RuntimeError("cannot bind the control socket to " + options.control + ": " +
                                 e.what());
  }
  endpoint_ = socket_.get(zmq::sockopt::last_endpoint);
}

ControlServer::~ControlServer() {
  stop_pool();
  zap_stop_ = true;
  if (zap_thread_.joinable()) zap_thread_.join();
}

// ZeroMQ's authentication protocol (ZAP, RFC 27): the library asks this handler whether a CURVE
// client's public key may connect. Only keys found in the authorized directory may.
void ControlServer::start_zap_handler(const std::string& authorized_keys_dir) {
  std::set<std::string> allowed;
  for (const auto& entry : std::filesystem::directory_iterator(authorized_keys_dir)) {
    if (!entry.is_regular_file()) continue;
    std::string z85 = read_key_file(entry.path());
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

void ControlServer::handle(std::vector<zmq::message_t> frames) {
  if (frames.size() < 2) return;  // no routing identity: nothing to answer
  Reply reply;
  std::string body = frames.back().to_string();
  frames.pop_back();
  reply.envelope = std::move(frames);

  protocol::RpcRequest request;
  try {
    request = protocol::parse_request(body);
  } catch (const protocol::RpcRequestError& e) {
    reply.body = protocol::make_error(e.id(), e).dump();
    send(std::move(reply));
    return;
  }
  auto run = [this, request](Reply out) {
    auto start = std::chrono::steady_clock::now();
    std::string outcome = "ok";
    try {
      out.body =
          protocol::make_result(request.id, service_.call(request.method, request.params)).dump();
    } catch (const std::exception& e) {
      out.body = protocol::make_error(request.id, e).dump();
      outcome = std::string("error: ") + e.what();
    }
    if (debug_ || (warn_ && outcome != "ok")) {
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      std::cerr << "hotswap-worker: " << request.method << " " << ms << " ms " << outcome << "\n";
    }
    return out;
  };
  if (!WorkerService::is_long(request.method)) {
    send(run(std::move(reply)));
    return;
  }
  // std::function needs a copyable callable; the routing frames are move-only.
  auto envelope = std::make_shared<std::vector<zmq::message_t>>(std::move(reply.envelope));
  submit([this, run, envelope] {
    Reply out = run(Reply{std::move(*envelope), {}});
    {
      std::lock_guard lock(mutex_);
      done_.push_back(std::move(out));
    }
    completions_.notify();
  });
}

void ControlServer::submit(std::function<void()> task) {
  std::lock_guard lock(pool_mutex_);
  queue_.push_back(std::move(task));
  if (idle_ > 0) {
    pool_wake_.notify_one();
    return;
  }
  pool_.emplace_back([this] {
    std::unique_lock guard(pool_mutex_);
    while (true) {
      ++idle_;
      pool_wake_.wait(guard, [&] { return pool_stop_ || !queue_.empty(); });
      --idle_;
      if (queue_.empty()) return;  // stopping, and nothing left to run
      auto next = std::move(queue_.front());
      queue_.pop_front();
      guard.unlock();
      next();
      guard.lock();
    }
  });
}

// Runs what is queued to completion, then joins every pooled thread.
void ControlServer::stop_pool() {
  {
    std::lock_guard lock(pool_mutex_);
    pool_stop_ = true;
  }
  pool_wake_.notify_all();
  for (auto& t : pool_) {
    if (t.joinable()) t.join();
  }
  pool_.clear();
}

void ControlServer::run(const EventFd& stop) {
  auto flush = [&] {
    completions_.drain();
    std::deque<Reply> ready;
    {
      std::lock_guard lock(mutex_);
      ready.swap(done_);
    }
    for (auto& r : ready)
      send(std::move(r));
  };
  while (!service_.shutdown_requested()) {
    zmq::pollitem_t items[] = {{socket_.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, completions_.fd(), ZMQ_POLLIN, 0},
                               {nullptr, stop.fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, 3, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;  // a signal; its eventfd is read on the next round
      throw;
    }
    if (items[2].revents & ZMQ_POLLIN) break;
    if (items[1].revents & ZMQ_POLLIN) flush();
    if (items[0].revents & ZMQ_POLLIN) {
      while (true) {
        std::vector<zmq::message_t> frames;
        if (!zmq::recv_multipart(socket_, std::back_inserter(frames), zmq::recv_flags::dontwait)) {
          break;
        }
        handle(std::move(frames));
      }
    }
  }
  // Calls in progress finish and are answered; nothing new is taken.
  stop_pool();
  flush();
}

}  // namespace hotswap::worker
