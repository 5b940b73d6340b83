// LogLine: one line of the worker's log, written to stderr with a single write(2) when the
// object goes out of scope. The worker logs from its control thread, its HTTP threads and its
// update thread at once; std::cerr is unbuffered, so `std::cerr << a << b` is one write per
// piece and two threads' lines interleave mid-line (a test reading "hotswap-worker:
// update_weights" then finds "hotswap-worker: hotswap-worker: health ..."). A line up to
// PIPE_BUF (4096 bytes) written at once is never split by another writer on a pipe.
#pragma once

#include <sstream>
#include <string>
#include <utility>

namespace hotswap::worker {

class LogLine {
 public:
  LogLine() = default;
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;
  ~LogLine();

  template <typename T>
  LogLine& operator<<(T&& value) {
    text_ << std::forward<T>(value);
    return *this;
  }

 private:
  std::ostringstream text_;
};

}  // namespace hotswap::worker
