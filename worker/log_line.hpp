// LogLine: one line of the worker's log, written to stderr with a single write(2) when the
// object goes out of scope. The worker logs from its control thread, its HTTP threads and its
// update thread at once; std::cerr is unbuffered, so `std::cerr << a << b` is one write per
// piece and two threads' lines interleave mid-line (a test reading "hotswap-worker:
// update_weights" then finds "hotswap-worker: hotswap-worker: health ..."). A line up to
// PIPE_BUF (4096 bytes) written at once is never split by another writer on a pipe.
#pragma once

#include <unistd.h>

#include <cerrno>
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

inline LogLine::~LogLine() {
  std::string line = std::move(text_).str();
  if (line.empty() || line.back() != '\n') line.push_back('\n');
  // A log line is best effort: a closed or full stderr must never take the worker down.
  const char* data = line.data();
  std::size_t left = line.size();
  while (left > 0) {
    ssize_t n = ::write(STDERR_FILENO, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    data += n;
    left -= static_cast<std::size_t>(n);
  }
}

}  // namespace hotswap::worker
