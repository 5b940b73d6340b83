#include "worker/event_fd.hpp"

#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "transport/posix_check.hpp"

namespace hotswap::worker {

namespace {
EventFd* g_stop = nullptr;
extern "C" void on_stop_signal(int) {
  if (g_stop != nullptr) g_stop->notify();  // async-signal-safe: one write(2)
}
}  // namespace

void notify_on_stop_signals(EventFd& stop) {
  g_stop = &stop;
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

EventFd::EventFd() : fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  HOTSWAP_POSIX_CHECK(fd_.get(), "create", "an eventfd");
}

void EventFd::notify() const noexcept {
  std::uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(fd_.get(), &one, sizeof(one));
}

void EventFd::drain() const noexcept {
  std::uint64_t value = 0;
  [[maybe_unused]] auto n = ::read(fd_.get(), &value, sizeof(value));
}

}  // namespace hotswap::worker
