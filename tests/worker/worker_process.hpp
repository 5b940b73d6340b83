// WorkerProcess: a real hotswap-worker child process for end-to-end tests, on a loopback port
// it picks itself (`--control tcp://127.0.0.1:*` unless given). Waits for the ready line and
// stops the worker on every exit path (transport::ChildProcess).
#pragma once

#include <cctype>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/worker_ready.hpp"

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

// Whether `line` is one Prometheus text sample: `name{label="value",...} number`. Written out
// by hand: std::regex trips GCC 12's -Wmaybe-uninitialized under the sanitizers.
inline bool is_metric_sample(const std::string& line) {
  std::size_t i = 0;
  auto name_char = [](char c, bool first, bool colon) {
    return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || (colon && c == ':') ||
           (!first && std::isdigit(static_cast<unsigned char>(c)));
  };
  auto name = [&](bool colon) {
    const std::size_t begin = i;
    while (i < line.size() && name_char(line[i], i == begin, colon))
      ++i;
    return i > begin;
  };
  if (!name(true)) return false;
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (i < line.size() && line[i] != '}') {
      if (!name(false) || line.compare(i, 2, "=\"") != 0) return false;
      for (i += 2; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\') ++i;  // an escaped character
      }
      if (i++ >= line.size()) return false;  // no closing quote
      if (i < line.size() && line[i] == ',') ++i;
    }
    if (i++ >= line.size()) return false;  // no closing brace
  }
  if (i >= line.size() || line[i++] != ' ') return false;
  const std::string value = line.substr(i);
  if (value == "NaN" || value == "+Inf" || value == "-Inf") return true;
  char* end = nullptr;
  std::strtod(value.c_str(), &end);
  return !value.empty() && end == value.c_str() + value.size();
}

// The lines of a /metrics page that are neither a comment nor one sample: what a scraper
// would refuse.
inline std::vector<std::string> malformed_metric_lines(const std::string& text) {
  std::vector<std::string> bad;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    if (!is_metric_sample(line)) bad.push_back(line);
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

  transport::ChildProcess process_;
  std::string endpoint_;
};

// A worker serving `model_dir` on the OpenAI-compatible routes on `http_port`, as model "tiny".
inline std::unique_ptr<WorkerProcess> openai_worker(const std::filesystem::path& model_dir,
                                                    int http_port,
                                                    const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args{"--model",
                                model_dir.string(),
                                "--http-port",
                                std::to_string(http_port),
                                "--served-model-name",
                                "tiny"};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<WorkerProcess>(args);
}

}  // namespace hotswap::testing
