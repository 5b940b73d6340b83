#include "worker/frontends/bounded_thread_pool.hpp"

#include "model_loader/intra_op_team.hpp"

namespace hotswap::worker {

BoundedThreadPool::BoundedThreadPool(std::size_t threads, std::size_t max_queued)
    : max_queued_(max_queued) {
  for (std::size_t i = 0; i < threads; ++i) {
    threads_.emplace_back([this] {
      std::unique_lock lock(mutex_);
      while (true) {
        wake_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopping, and nothing left to run
        auto task = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        task();
        // A task that ran parallel work (an update's copies) leaves no team behind: only the
        // scheduler's thread keeps one (model_loader/intra_op_team.hpp).
        model_loader::release_intra_op_team();
        lock.lock();
      }
    });
  }
}

BoundedThreadPool::~BoundedThreadPool() {
  stop();
}

bool BoundedThreadPool::try_submit(std::function<void()>& task) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || queue_.size() >= max_queued_) return false;
    queue_.push_back(std::move(task));
  }
  wake_.notify_one();
  return true;
}

void BoundedThreadPool::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& t : threads_) {
    if (t.joinable()) t.join();
  }
  threads_.clear();
}

}  // namespace hotswap::worker
