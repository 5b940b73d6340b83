// RetainedExports: memory whose CUDA IPC exports a worker may still have open, kept alive until
// the worker says it has closed them. Freeing memory that another process still maps is
// undefined behaviour (cudaIpcOpenMemHandle), so a trainer engine hands its exports here before
// their handles go out, and they are freed only after the worker answered a call that closes
// every mapping it holds: finish_weight_update, or shutdown_weight_transfer_engine (a hotswap
// worker closes them in both before it answers, receiver/ipc_engine.cpp; it answers one weight
// call at a time, so none is still reading then). A call that failed or timed out proves
// nothing (the worker may still be copying), so everything stays.
//
// What is still held when this goes away is never freed: it is handed to a holder that lives
// until the process exits. A leak is safe; a free under a live mapping is not.
//
// No CUDA here: owners are type-erased, so tests drive it with any memory.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace hotswap::trainer_sdk {

class WeightSyncClient;

class RetainedExports {
 public:
  // Anything whose destruction frees exported memory: a tensor, a device buffer.
  using Owner = std::shared_ptr<void>;

  RetainedExports() = default;
  ~RetainedExports();
  RetainedExports(const RetainedExports&) = delete;
  RetainedExports& operator=(const RetainedExports&) = delete;

  // Keeps `owner` alive until the worker confirms; call it before the handle goes out. An owner
  // held already (the same pointer: a buffer exported once and offered every round) is held
  // once.
  void retain(Owner owner);

  // Runs `confirming_call`, a call whose success means the worker maps nothing of this trainer
  // (a round through its finish_weight_update; a shutdown). When it returns, everything held is
  // freed, including what the call retained itself; when it throws, everything stays and the
  // error propagates.
  void release_after(const std::function<void()>& confirming_call);

  // The end of a trainer's session: when anything is held, asks every worker to end a session
  // in progress and shut its channel down (abort_and_shutdown_weight_transfer_engine), and
  // frees it all once they have answered. Best effort, never throws: a worker that refuses or
  // cannot be reached leaves everything held.
  void end_session(WeightSyncClient& client) noexcept;

  std::size_t size() const { return owners_.size(); }
  bool empty() const { return owners_.empty(); }

 private:
  std::vector<Owner> owners_;
};

// How many owners RetainedExports destroyed without the worker's word have handed over, kept
// until the process exits (process-wide; for tests and diagnostics).
std::size_t exports_kept_until_exit();

}  // namespace hotswap::trainer_sdk
