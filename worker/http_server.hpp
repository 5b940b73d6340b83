// HttpServer: vLLM's weight-sync HTTP routes (its dev RLHF router) on the same WorkerService as
// the ZeroMQ control socket, so vLLM's own HTTPVLLMWeightSyncClient drives a hotswap worker
// unchanged; plus GET /metrics in Prometheus text format, GET /health and POST /generate.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "worker/worker_service.hpp"

namespace httplib {
class Server;
}

namespace hotswap::worker {

class HttpServer {
 public:
  // Binds host:port (port 0: any free port) and starts serving on threads of its own.
  HttpServer(WorkerService& service, const std::string& host, int port);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

 private:
  WorkerService& service_;
  std::unique_ptr<httplib::Server> server_;
  int port_ = 0;
  std::thread thread_;
};

// The Prometheus exposition of the service's counters.
std::string render_metrics(const WorkerService& service);

}  // namespace hotswap::worker
