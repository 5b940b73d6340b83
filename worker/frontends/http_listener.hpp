// HttpListener: an asynchronous HTTP/1.1 server on Boost.Asio and Boost.Beast, made for traffic
// the worker does not control.
//
// - Reading is asynchronous on a couple of I/O threads: an idle or slow connection costs a
//   socket and a buffer, never a thread, so thousands of them starve nobody.
// - A request's header must arrive within limits.header_timeout and its body within
//   limits.body_timeout, however the bytes trickle (one deadline per phase, not per byte);
//   bodies are capped for every framing (http_request_reader.hpp).
// - A complete request runs on a handler thread of a bounded pool (`threads` at once, at most
//   `max_queued` waiting; past that, 503 at once). Probes (what `is_probe` picks: /health,
//   /metrics) have a small pool of their own, so that a pool full of streams never leaves a
//   health check unanswered.
// - Requests on one connection are read, answered and written in order: pipelined requests are
//   all answered, in the order sent.
// - Every error the HTTP layer produces itself has a JSON body.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "worker/frontends/http_message.hpp"
#include "worker/frontends/http_request_reader.hpp"

namespace hotswap::worker {

class HttpListener {
 public:
  using Handler = std::function<HttpResponse(HttpRequest&)>;
  using ProbeTest = std::function<bool(const HttpRequest&)>;

  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0: any free port
    HttpLimits limits;
    std::size_t threads = 128;
    std::size_t max_queued = 4096;
  };

  // Binds and starts serving; RuntimeError naming the address when it cannot bind.
  HttpListener(const Options& options, Handler handler, ProbeTest is_probe);
  // Stops accepting, closes every connection (a stream's next write fails, a waiting generate
  // sees its caller gone), lets running handlers return, and joins every thread.
  ~HttpListener();
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  int port() const;

  class Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

}  // namespace hotswap::worker
