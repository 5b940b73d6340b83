#include "transport/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "transport/posix_check.hpp"

namespace hotswap::transport {

ChildProcess::ChildProcess(const std::string& binary, const std::vector<std::string>& args,
                           Output output) {
  UniqueFd read_end, write_end;
  if (output == Output::kCaptured) {
    int fds[2];
    HOTSWAP_POSIX_CHECK(::pipe2(fds, O_CLOEXEC), "create the output pipe of", binary);
    read_end = UniqueFd(fds[0]);
    write_end = UniqueFd(fds[1]);
  }
  // argv is built before fork: the child only calls async-signal-safe functions.
  std::vector<std::string> storage = args;
  std::string program = binary;
  std::vector<char*> argv{program.data()};
  for (auto& a : storage)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = ::fork();
  HOTSWAP_POSIX_CHECK(pid_, "fork to start", binary);
  if (pid_ == 0) {
    if (write_end.valid()) {
      ::dup2(write_end.get(), 1);
      ::dup2(write_end.get(), 2);
    }
    ::execv(program.c_str(), argv.data());
    const char message[] = "exec failed\n";
    [[maybe_unused]] auto n = ::write(2, message, sizeof(message) - 1);
    ::_exit(127);
  }
  write_end.reset();  // the child's end, held by the child alone from here on
  out_ = std::move(read_end);
}

ChildProcess::~ChildProcess() {
  stop();
}

bool ChildProcess::read_output(std::chrono::milliseconds timeout) {
  if (!out_.valid()) return false;
  pollfd p{out_.get(), POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  char buffer[4096];
  ssize_t n = ::read(out_.get(), buffer, sizeof(buffer));
  if (n <= 0) return false;
  output_.append(buffer, static_cast<std::size_t>(n));
  return true;
}

std::vector<std::string> ChildProcess::take_lines() {
  std::vector<std::string> lines;
  for (std::size_t end; (end = output_.find('\n', taken_)) != std::string::npos; taken_ = end + 1) {
    lines.push_back(output_.substr(taken_, end - taken_));
  }
  return lines;
}

int ChildProcess::finish(int status) {
  pid_ = -1;
  status_ = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  signal_ = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  while (read_output(std::chrono::milliseconds(0))) {
  }
  return status_;
}

std::optional<int> ChildProcess::poll_exit() {
  if (pid_ <= 0) return status_;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) return finish(status);
  return std::nullopt;
}

std::optional<int> ChildProcess::wait_exit(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (auto status = poll_exit()) return status;
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    // Keeps draining the pipe, so a child blocked writing to it can end; with no output to
    // read (inherited, or closed), sleeps instead of spinning.
    if (!read_output(std::chrono::milliseconds(10))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
}

int ChildProcess::stop(std::chrono::milliseconds grace) {
  if (pid_ <= 0) return status_;
  ::kill(pid_, SIGTERM);
  if (auto status = wait_exit(grace)) return *status;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  return finish(status);
}

}  // namespace hotswap::transport
