// HttpServer: vLLM's weight-sync HTTP routes (its dev RLHF router) on the same WorkerService as
// the ZeroMQ control socket, so vLLM's own HTTPVLLMWeightSyncClient drives a hotswap worker
// unchanged; vLLM's OpenAI-compatible routes (/v1/completions, /v1/models, /tokenize,
// /detokenize); GET /metrics in Prometheus text format, GET /health and POST /generate.
//
// Guarded as vLLM's server is: with an API key (--api-key or VLLM_API_KEY) every route but
// /health and /metrics needs `Authorization: Bearer <key>` (else 401); the OpenAI routes take
// only `Content-Type: application/json` (vLLM's 400 otherwise), and the weight-sync routes a
// JSON body or none (415 otherwise: a web page cannot post a form to them). The HTTP layer
// (HttpListener) bounds headers, bodies and their deadlines, the handler threads and the queue,
// and cancels a generate whose client hangs up. Bound beyond loopback without a key, it warns at
// start.
#pragma once

#include <memory>
#include <string>

#include "worker/worker_options.hpp"
#include "worker/worker_service.hpp"

namespace hotswap::worker {

class HttpListener;

class HttpServer {
 public:
  // Binds options.http_host:options.http_port (port 0 here: any free port) and starts serving
  // on threads of its own.
  HttpServer(WorkerService& service, const WorkerOptions& options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const;

 private:
  struct Routes;
  WorkerService& service_;
  std::unique_ptr<Routes> routes_;
  // Declared last: destroyed first, so no handler runs on routes already gone.
  std::unique_ptr<HttpListener> listener_;
};

}  // namespace hotswap::worker
