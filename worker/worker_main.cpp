// hotswap-worker: one process per device. Loads a model, serves generation, and takes new
// weights through vLLM's weight-transfer contract over ZeroMQ JSON-RPC (and HTTP).
#include <malloc.h>

#include <iostream>
#include <memory>

#include "transport/exception_text.hpp"
#include "worker/event_fd.hpp"
#include "worker/frontends/control_server.hpp"
#include "worker/frontends/http_server.hpp"
#include "worker/parallel/tensor_parallel_rank.hpp"
#include "worker/worker_options.hpp"
#include "worker/worker_service.hpp"

using namespace hotswap;

int main(int argc, char** argv) {
  // Allocations of 4 MiB and more (a large request's body, its parsed ids, a long decoded text)
  // are mapped and unmapped on their own. glibc's default threshold rises after each such free,
  // up to 32 MiB, and the arenas of the handler threads then kept each large request's memory:
  // 55 MB per 10^6-id detokenize, never handed back. Fixed, it is returned when the request ends.
  ::mallopt(M_MMAP_THRESHOLD, 4 << 20);
  // A fixed mmap threshold also fixes the trim threshold at 128 KiB: every decode step's freed
  // activations (a few hundred KiB each) were handed back and faulted in again at the next step:
  // about half of the 45,000–68,000 page faults a second under 64 streams, which took 7–9 % of
  // the stepping thread's time.
  // Up to 32 MiB free at the top of an arena is kept; large requests still trim after them.
  ::mallopt(M_TRIM_THRESHOLD, 32 << 20);
  auto options = worker::WorkerOptions::parse(argc, argv);
  worker::EventFd stop;
  worker::notify_on_stop_signals(stop);
  if (options.tensor_parallel_rank > 0) return worker::run_tensor_parallel_rank(options, stop);

  int status = 0;
  try {
    worker::WorkerService service(options);
    worker::ControlServer server(service, options);
    std::unique_ptr<worker::HttpServer> http;
    std::string http_line;
    if (options.http_port != 0) {
      http = std::make_unique<worker::HttpServer>(service, options);
      http_line = "; http http://" + options.http_host + ":" + std::to_string(http->port());
    }
    std::cout << "hotswap-worker ready: control " << server.endpoint() << "; " << service.describe()
              << http_line << std::endl;
    server.run(stop);
    std::cout << "hotswap-worker: shutting down" << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "hotswap-worker: " << transport::one_line_cause(e) << std::endl;
    status = 1;
  }
  return status;
}
