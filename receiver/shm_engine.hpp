// ShmWeightTransferEngine: the worker side of the `shm` backend, the CPU twin of `ipc` for a
// trainer and workers on one host. The trainer fills shared-memory buffers with packed chunks
// (the IPC chunk rule, so each fits); this engine opens them at the handshake, and per chunk
// waits for it (bounded), copies the tensors out into the model, and releases the buffer for
// the trainer's next chunk. Several workers read the same segments.
//
// A trainer with a shared weight arena names it at the handshake; the engine maps it read-only
// and copies the round's arena tensors (by the offsets in update_info) straight into the model,
// every offset checked against the arena's size before the first byte is copied.
//
// A trainer is trusted with nothing: each segment is checked before it is opened (a hotswap
// name, this user's, a hotswap header that matches its size: transport/shm_segment.hpp), again
// before every round (still its size), and they are mapped under a BusFaultGuard that turns a
// SIGBUS from a segment shrunk mid-copy into a failed round. The previous weights keep serving.
//
// Nothing a trainer leaves stays in /dev/shm: the engine watches the trainer process and
// unlinks its segments the moment it is gone (killed mid-round, or idle after init), and at
// every handshake and shutdown sweeps /dev/shm for hotswap segments whose creator is gone.
// A live trainer's segments are never removed: its arena is its model, which other workers
// may still need.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "protocol/chunk_plan.hpp"
#include "protocol/shm_info.hpp"
#include "receiver/weight_transfer_engine.hpp"
#include "transport/process_watch.hpp"
#include "transport/shm_ring.hpp"

namespace hotswap::receiver {

class ShmWeightTransferEngine final
    : public TypedWeightTransferEngine<protocol::ShmInitInfo, protocol::ShmUpdateInfo> {
 public:
  using TypedWeightTransferEngine::TypedWeightTransferEngine;
  ~ShmWeightTransferEngine() override;

  std::string_view name() const override { return "ShmWeightTransferEngine"; }
  void start_weight_update() override { model().start_reload(); }
  void finish_weight_update() override { model().finish_reload(); }
  void shutdown() override;

 protected:
  void init_transfer_channel(const protocol::ShmInitInfo& init_info) override;
  void receive_weights(const protocol::ShmUpdateInfo& update_info) override;

 private:
  void load_from_arena(const protocol::ShmUpdateInfo& update_info);
  // One tensor of chunk `sequence`, as soon as its bytes are in the buffer.
  // `window`: the round's stream window (0: the chunk lies whole in its buffer).
  void receive_slice(std::uint64_t sequence, const protocol::ChunkSlice& slice,
                     const protocol::ParamMeta& p, std::size_t window);
  // What load_weights gets for a tensor read from a segment (a view of it, or a copy).
  at::Tensor for_model(const at::Tensor& host) const;
  void close_channel();

  std::unique_ptr<transport::ShmRing> ring_;
  std::unique_ptr<transport::ShmSegment> arena_;
  std::unique_ptr<transport::ProcessWatch> watch_;  // the trainer that made the segments
  std::atomic<bool> trainer_gone_{false};
};

}  // namespace hotswap::receiver
