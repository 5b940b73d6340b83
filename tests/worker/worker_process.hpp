// WorkerProcess: a real hotswap-worker child process for end-to-end tests. Starts it with the
// given flags on a loopback port it picks itself (`--control tcp://127.0.0.1:*` unless given),
// waits for its ready line, and stops it on every exit path (SIGTERM, then SIGKILL).
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace hotswap::testing {

class WorkerProcess {
 public:
  explicit WorkerProcess(std::vector<std::string> args,
                         std::chrono::milliseconds ready_timeout = std::chrono::seconds(30)) {
    bool has_control = false;
    for (const auto& a : args)
      has_control |= a == "--control";
    if (!has_control) {
      args.push_back("--control");
      args.push_back("tcp://127.0.0.1:*");
    }
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      std::vector<char*> argv;
      std::string binary = HOTSWAP_WORKER_BINARY;
      argv.push_back(binary.data());
      for (auto& a : args)
        argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out_ = fds[0];
    const std::string marker = "hotswap-worker ready: control ";
    auto deadline = std::chrono::steady_clock::now() + ready_timeout;
    while (true) {
      auto pos = output_.find(marker);
      if (pos != std::string::npos) {
        auto end = output_.find(';', pos);
        if (end != std::string::npos) {
          endpoint_ = output_.substr(pos + marker.size(), end - pos - marker.size());
          break;
        }
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !read_some(left)) {
        stop();
        throw std::runtime_error("hotswap-worker did not become ready: " + output_);
      }
    }
  }

  ~WorkerProcess() { stop(); }
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }

  // Everything the worker printed so far.
  const std::string& output() {
    while (read_some(std::chrono::milliseconds(0))) {
    }
    return output_;
  }

  // SIGTERM, then waits; SIGKILL after `timeout`. Returns the exit status (-1 if killed).
  int stop(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    output();
    ::close(out_);
    pid_ = -1;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return status_;
  }

  // Waits for the process to exit by itself (e.g. after a `shutdown` call).
  int wait_exit(std::chrono::milliseconds timeout) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return stop();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    output();
    ::close(out_);
    pid_ = -1;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return status_;
  }

 private:
  bool read_some(std::chrono::milliseconds timeout) {
    pollfd p{out_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    char buffer[4096];
    ssize_t n = ::read(out_, buffer, sizeof(buffer));
    if (n <= 0) return false;
    output_.append(buffer, static_cast<std::size_t>(n));
    return true;
  }

  pid_t pid_ = -1;
  int out_ = -1;
  int status_ = -1;
  std::string output_;
  std::string endpoint_;
};

}  // namespace hotswap::testing
