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
// If the trainer dies mid-round the wait times out: the session fails, and the engine unlinks
// the segments the dead trainer left behind. Segment names carry their creator's pid, so a
// worker only ever unlinks the segments of a trainer that is gone: a live one's arena is its
// model, which other workers may still need to open.
#pragma once

#include <memory>

#include "protocol/shm_info.hpp"
#include "receiver/weight_transfer_engine.hpp"
#include "transport/shm_ring.hpp"

namespace hotswap::receiver {

class ShmWeightTransferEngine final
    : public TypedWeightTransferEngine<protocol::ShmInitInfo, protocol::ShmUpdateInfo> {
 public:
  using TypedWeightTransferEngine::TypedWeightTransferEngine;

  std::string_view name() const override { return "ShmWeightTransferEngine"; }
  void start_weight_update() override { model().start_reload(); }
  void finish_weight_update() override { model().finish_reload(); }
  // Also unlinks the segments of a trainer that is gone, so that nothing it left stays in
  // /dev/shm.
  void shutdown() override;

 protected:
  void init_transfer_channel(const protocol::ShmInitInfo& init_info) override;
  void receive_weights(const protocol::ShmUpdateInfo& update_info) override;

 private:
  void load_from_arena(const protocol::ShmUpdateInfo& update_info);
  void unlink_dead_trainers_segments();

  std::unique_ptr<transport::ShmRing> ring_;
  std::unique_ptr<transport::ShmSegment> arena_;
  std::vector<std::string> names_;  // every segment the trainer made: the ring's and the arena
};

}  // namespace hotswap::receiver
