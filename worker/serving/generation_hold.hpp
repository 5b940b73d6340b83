// GenerationHold: the scheduler stops stepping (after the step in progress) while one lives, and
// steps again once every hold is gone. The weight calls that write what generation reads take
// one, so no exit path (a refused start, a failed update, a commit that threw) can leave
// generation stopped.
#pragma once

#include "worker/serving/generation_scheduler.hpp"

namespace hotswap::worker {

class GenerationHold {
 public:
  explicit GenerationHold(GenerationScheduler& scheduler) : scheduler_(&scheduler) {
    scheduler_->hold();
  }
  ~GenerationHold() { scheduler_->release(); }
  GenerationHold(const GenerationHold&) = delete;
  GenerationHold& operator=(const GenerationHold&) = delete;

 private:
  GenerationScheduler* scheduler_;
};

}  // namespace hotswap::worker
