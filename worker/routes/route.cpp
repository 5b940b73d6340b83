#include "worker/routes/route.hpp"

#include <condition_variable>
#include <mutex>

namespace hotswap::worker {

nlohmann::ordered_json PendingAnswer::wait(const std::function<bool()>& caller_gone) {
  struct Ready {
    std::mutex mutex;
    std::condition_variable changed;
    bool done = false;
  };
  // Shared with the callback, which may run after this returns (a cancelled run's last word).
  auto ready = std::make_shared<Ready>();
  when_done([ready] {
    std::lock_guard lock(ready->mutex);
    ready->done = true;
    ready->changed.notify_all();
  });
  std::unique_lock lock(ready->mutex);
  // The run ends by itself at the worker's timeout; the caller may leave earlier.
  while (
      !ready->changed.wait_for(lock, std::chrono::milliseconds(100), [&] { return ready->done; })) {
    if (caller_gone && caller_gone()) {
      lock.unlock();
      cancel();
      lock.lock();
    }
  }
  return response();
}

}  // namespace hotswap::worker
