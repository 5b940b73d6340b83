// WorkerProcess: a real hotswap-worker child process for end-to-end tests, on a loopback port
// it picks itself (`--control tcp://127.0.0.1:*` unless given). Waits for the ready line and
// stops the worker on every exit path (worker::ChildProcess).
#pragma once

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/child_process.hpp"

namespace hotswap::testing {

// The processes `parent` started (a tensor-parallel worker's other ranks, a launcher's
// replicas), from /proc.
inline std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                   "/children");
  for (pid_t pid; in >> pid;)
    out.push_back(pid);
  return out;
}

// The lines of a /metrics page that are neither a comment nor one Prometheus text sample
// (`name{labels} value`): what a scraper would refuse.
inline std::vector<std::string> malformed_metric_lines(const std::string& text) {
  static const std::regex sample(
      R"(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? )"
      R"(([-+]?[0-9.eE+-]+|NaN|[+-]Inf)$)");
  std::vector<std::string> bad;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (!std::regex_match(line, sample)) bad.push_back(line);
  }
  return bad;
}

class WorkerProcess {
 public:
  explicit WorkerProcess(std::vector<std::string> args,
                         std::chrono::milliseconds ready_timeout = std::chrono::seconds(30))
      : process_(HOTSWAP_WORKER_BINARY, with_control(std::move(args))) {
    try {
      endpoint_ = worker::wait_until_ready(process_, ready_timeout);
    } catch (const std::exception& e) {
      process_.stop();
      throw std::runtime_error(e.what());
    }
  }

  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return process_.pid(); }
  const std::string& output() {
    while (process_.read_output(std::chrono::milliseconds(0))) {
    }
    return process_.output();
  }
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(10)) {
    return process_.stop(grace);
  }
  // Whether `needle` shows up in the output within `timeout` (a log line may trail the reply).
  bool wait_for_output(const std::string& needle, std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    while (output().find(needle) == std::string::npos) {
      if (std::chrono::steady_clock::now() >= deadline) return false;
      process_.read_output(std::chrono::milliseconds(50));
    }
    return true;
  }

  // Waits for the worker to exit by itself (after a `shutdown` call); stops it past `timeout`.
  int wait_exit(std::chrono::milliseconds timeout) {
    if (auto status = process_.wait_exit(timeout)) return *status;
    return process_.stop();
  }

 private:
  static std::vector<std::string> with_control(std::vector<std::string> args) {
    for (const auto& a : args) {
      if (a == "--control") return args;
    }
    args.push_back("--control");
    args.push_back("tcp://127.0.0.1:*");
    return args;
  }

  worker::ChildProcess process_;
  std::string endpoint_;
};

}  // namespace hotswap::testing
