// Knowing when a peer process on this host is gone: the shm backend's trainer, whose segments a
// worker must clear once nobody else will. A pid alone is not an identity (pids are reused), so
// a process is its pid plus its start time; and a killed child that its parent has not reaped
// yet (a zombie) counts as gone, though kill(pid, 0) still succeeds on it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>

#include "transport/unique_fd.hpp"

namespace hotswap::transport {

struct ProcessIdentity {
  pid_t pid = 0;
  std::uint64_t start_time = 0;  // /proc/<pid>/stat's starttime, in clock ticks after boot

  static ProcessIdentity self();
  // The identity of the process that has `pid` now; start_time 0 when there is none.
  static ProcessIdentity of(pid_t pid);
  // Whether this process still runs (not exited, not a zombie, its pid not taken by another).
  bool alive() const;
};

// Calls `on_exit` once, from a thread of its own, when `process` ends: at once where the
// kernel has pidfds, else within a fifth of a second. The destructor stops the watch.
class ProcessWatch {
 public:
  ProcessWatch(ProcessIdentity process, std::function<void()> on_exit);
  ~ProcessWatch();
  ProcessWatch(const ProcessWatch&) = delete;
  ProcessWatch& operator=(const ProcessWatch&) = delete;

  const ProcessIdentity& process() const { return process_; }
  bool exited() const { return exited_; }

 private:
  void run(std::function<void()> on_exit);

  ProcessIdentity process_;
  UniqueFd stop_fd_;  // an eventfd the destructor signals
  std::atomic<bool> exited_{false};
  std::thread thread_;
};

}  // namespace hotswap::transport
