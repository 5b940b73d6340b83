// EventFd: RAII over a Linux eventfd, the wake-up line from worker threads (and from a signal
// handler: notify() is async-signal-safe) into the control server's zmq_poll loop.
#pragma once

#include "transport/unique_fd.hpp"

namespace hotswap::worker {

class EventFd {
 public:
  EventFd();

  int fd() const { return fd_.get(); }
  void notify() const noexcept;
  // Clears pending notifications.
  void drain() const noexcept;

 private:
  transport::UniqueFd fd_;
};

// Routes SIGINT and SIGTERM to `stop` (and ignores SIGPIPE) for the life of the process: the
// programs' main loops poll its descriptor.
void notify_on_stop_signals(EventFd& stop);

}  // namespace hotswap::worker
