#include "worker/worker_ready.hpp"

#include "protocol/errors.hpp"

namespace hotswap::worker {

std::string wait_until_ready(transport::ChildProcess& worker, std::chrono::milliseconds timeout) {
  const std::string marker = "hotswap-worker ready: control ";
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::string& out = worker.output();
    if (auto pos = out.find(marker); pos != std::string::npos) {
      if (auto end = out.find(';', pos); end != std::string::npos) {
        return out.substr(pos + marker.size(), end - pos - marker.size());
      }
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || !worker.read_output(left)) {
      throw protocol::RuntimeError("hotswap-worker did not become ready: " + worker.output());
    }
  }
}

}  // namespace hotswap::worker
