#include "worker/log_line.hpp"

#include <unistd.h>

#include <cerrno>

namespace hotswap::worker {

LogLine::~LogLine() {
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
