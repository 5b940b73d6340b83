// BoundedThreadPool: a fixed set of threads, started once (libtorch's per-thread set-up is paid
// once per thread, not per task), and a queue that holds at most `max_queued` tasks. Past that,
// try_submit refuses instead of growing: the caller answers "overloaded". Both of the worker's
// servers run their long work on one (the control server's calls, the HTTP connections).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hotswap::worker {

class BoundedThreadPool {
 public:
  BoundedThreadPool(std::size_t threads, std::size_t max_queued);
  ~BoundedThreadPool();  // stop()
  BoundedThreadPool(const BoundedThreadPool&) = delete;
  BoundedThreadPool& operator=(const BoundedThreadPool&) = delete;

  // Queues `task`; false (and `task` not taken) when max_queued tasks already wait or the pool
  // is stopping.
  bool try_submit(std::function<void()>& task);
  // Runs what is queued to completion, then joins the threads. Idempotent.
  void stop();

  std::size_t threads() const { return threads_.size(); }
  std::size_t max_queued() const { return max_queued_; }

 private:
  std::size_t max_queued_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

}  // namespace hotswap::worker
