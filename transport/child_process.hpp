// ChildProcess: RAII over a child process started with fork/exec, whose stdout and stderr come
// back through one pipe (or, kInherited, go where its parent's go). Destruction stops it
// (SIGTERM, then SIGKILL after a grace period), so no child outlives its owner on any exit
// path. The one way hotswap starts a process: hotswap-launch's replicas, a worker's
// tensor-parallel ranks, hotswap-trainer's other ranks, and the tests' and benchmarks' workers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "transport/unique_fd.hpp"

namespace hotswap::transport {

class ChildProcess {
 public:
  enum class Output { kCaptured, kInherited };
  // `args` follow argv[0], which is `binary`.
  ChildProcess(const std::string& binary, const std::vector<std::string>& args,
               Output output = Output::kCaptured);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  int output_fd() const { return out_.get(); }
  bool running() const { return pid_ > 0; }

  // Reads what is available within `timeout` into the output buffer; false at end of output
  // (and always for kInherited).
  bool read_output(std::chrono::milliseconds timeout);
  const std::string& output() const { return output_; }
  // Takes the complete lines read so far out of the buffer.
  std::vector<std::string> take_lines();

  // The exit status if the process has ended (-1 for a signal), without waiting.
  std::optional<int> poll_exit();
  // Waits up to `timeout` for the process to end by itself.
  std::optional<int> wait_exit(std::chrono::milliseconds timeout);
  // SIGTERM, then SIGKILL after `grace`. Returns the exit status (-1 if killed by a signal).
  int stop(std::chrono::milliseconds grace = std::chrono::seconds(10));
  // The signal that ended the process, 0 if it exited (or has not ended): for diagnostics.
  int term_signal() const { return signal_; }

 private:
  int finish(int status);

  pid_t pid_ = -1;
  UniqueFd out_;
  int status_ = -1;
  int signal_ = 0;
  std::string output_;
  std::size_t taken_ = 0;
};

}  // namespace hotswap::transport
