// AsyncCall: runs one control call on a thread of its own so that it can proceed concurrently
// with the transmit, as vLLM's trainer engines do with update_weights. The caller may wait for
// it with a timeout, or walk away: the thread is detached and owns everything it touches, so a
// call that never returns (its worker blocked in a collective that will not complete) cannot
// turn a transmit error into a hang.
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "protocol/errors.hpp"

namespace hotswap::trainer_sdk {

class AsyncCall {
 public:
  explicit AsyncCall(std::function<void()> call) : state_(std::make_shared<State>()) {
    std::thread([state = state_, call = std::move(call)] {
      std::exception_ptr error;
      try {
        call();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard lock(state->mutex);
      state->done = true;
      state->error = error;
      state->cv.notify_all();
    }).detach();
  }

  // Whether the call has ended with an error already (cheap; never blocks).
  bool failed() const {
    std::lock_guard lock(state_->mutex);
    return state_->done && state_->error != nullptr;
  }
  // Rethrows the call's error if it has ended with one.
  void rethrow_if_failed() const {
    std::lock_guard lock(state_->mutex);
    if (state_->done && state_->error) std::rethrow_exception(state_->error);
  }

  // Waits for the call; rethrows its error; TimeoutError naming `what` after `timeout`.
  void wait(std::chrono::milliseconds timeout, const std::string& what) const {
    std::unique_lock lock(state_->mutex);
    if (!state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
      throw protocol::TimeoutError(what + " did not return within " +
                                   std::to_string(timeout.count()) + " ms");
    }
    if (state_->error) std::rethrow_exception(state_->error);
  }

 private:
  struct State {
    mutable std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
  };
  std::shared_ptr<State> state_;
};

}  // namespace hotswap::trainer_sdk
