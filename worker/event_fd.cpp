#include "worker/event_fd.hpp"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "transport/posix_check.hpp"

namespace hotswap::worker {

EventFd::EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  HOTSWAP_POSIX_CHECK(fd_, "eventfd");
}

EventFd::~EventFd() {
  ::close(fd_);
}

void EventFd::notify() const noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_, &one, sizeof(one));
}

void EventFd::drain() const noexcept {
  std::uint64_t value = 0;
  [[maybe_unused]] auto n = ::read(fd_, &value, sizeof(value));
}

}  // namespace hotswap::worker
