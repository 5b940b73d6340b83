// HttpServer: vLLM's weight-sync HTTP routes (its dev RLHF router) on the same WorkerService as
// the ZeroMQ control socket, so vLLM's own HTTPVLLMWeightSyncClient drives a hotswap worker
// unchanged; plus GET /metrics in Prometheus text format, GET /health and POST /generate.
//
// Guarded as vLLM's server is: with an API key (--api-key or VLLM_API_KEY) every route but
// /health and /metrics needs `Authorization: Bearer <key>` (else 401); a body over
// --max-request-bytes is a 413; a fixed pool of threads serves connections and at most
// --max-queued-requests wait for one (past it, 503); a generate whose client hangs up is
// cancelled. Bound beyond loopback without a key, it warns at start.
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "worker/worker_options.hpp"
#include "worker/worker_service.hpp"

namespace httplib {
class Server;
}

namespace hotswap::worker {

class HttpServer {
 public:
  // Binds options.http_host:options.http_port (port 0 here: any free port) and starts serving
  // on threads of its own.
  HttpServer(WorkerService& service, const WorkerOptions& options);
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

// A label value as the exposition format writes it: backslash, double quote and newline
// escaped.
std::string escape_label_value(const std::string& value);

}  // namespace hotswap::worker
