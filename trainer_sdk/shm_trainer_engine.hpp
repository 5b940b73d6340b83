// ShmTrainerEngine: the trainer side of the `shm` backend (trainer and workers on one host).
// At trainer_init it creates `num_buffers` POSIX shared-memory buffers (0600, unlinked on every
// exit path) and ships their names at the handshake. Each round: start, update on a side
// thread, then pack chunks (the IPC rule: flush before overflowing) into the buffers in turn,
// each reused only once every worker has copied out of it, drain, finish.
//
// With `stream_window`, and once every worker joined the buffers' stream window at the handshake
// (every worker of this build does), each chunk passes through a 2 MiB circular window at the
// start of its buffer instead of lying there whole, so the bytes can stay in a cache the two
// sides share between the two copies (transport/shm_ring.hpp). Off by default: it pays where
// trainer and worker run on cores of one last-level cache, and costs where they do not; on the
// 2-core VM it was measured on it was as often 1.15x one memcpy as 1.8x, where whole chunks
// were 1.2-1.7x (docs/benchmarks.md). It never touches more of a buffer than the window.
//
// With an `arena` (SharedWeightArena), the tensors the source yields from it are not copied at
// all: the round names their offsets and the workers read them in place.
#pragma once

#include <array>
#include <chrono>
#include <memory>

#include "protocol/backend_names.hpp"
#include "protocol/chunk_plan.hpp"
#include "protocol/shm_info.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"
#include "transport/shm_ring.hpp"

namespace hotswap::trainer_sdk {

class AsyncCall;

struct ShmTrainerInitInfo : TrainerInitInfoFor<ShmTrainerInitInfo> {
  static constexpr std::string_view backend = protocol::backends::kShm;
  ShmTrainerInitInfo(int num_workers, int rank)
      : TrainerInitInfoFor(rank), num_workers(num_workers) {}
  int num_workers;                                     // how many workers read each chunk
  std::int64_t packed_buffer_size_bytes = 64ll << 20;  // per buffer
  int num_buffers = 2;                                 // filled while workers read another
  std::shared_ptr<SharedWeightArena> arena;            // tensors read in place, if any
  bool stream_window = false;  // through the cache-sized window where every worker can
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};

  static constexpr std::array settings_read = {settings::kBufferSize, settings::kShmArena,
                                               settings::kShmWindow};
  static ShmTrainerInitInfo from_settings(const TrainerSettings& s) {
    ShmTrainerInitInfo info(s.num_workers, s.rank);
    info.packed_buffer_size_bytes = s.packed_buffer_size_bytes;
    info.timeout = s.timeout;
    info.arena = s.shm_arena;
    info.stream_window = s.shm_window;
    return info;
  }
};

class ShmTrainerEngine : public TrainerWeightTransferEngine {
 public:
  using InitInfo = ShmTrainerInitInfo;
  static std::unique_ptr<ShmTrainerEngine> trainer_init(const ShmTrainerInitInfo& info,
                                                        std::shared_ptr<WeightSyncClient> client,
                                                        std::shared_ptr<WeightSource> source);
  ShmTrainerEngine(std::shared_ptr<WeightSyncClient> client, std::shared_ptr<WeightSource> source,
                   const ShmTrainerInitInfo& info);

  void send_weights() override;
  void shutdown() override { ring_.reset(); }  // unlinks the segments

  // The window the next round streams through (0: whole chunks).
  std::size_t stream_window_bytes() const {
    return ring_ && info_.stream_window ? ring_->window_bytes() : 0;
  }
  std::vector<std::string> segment_names() const {
    return ring_ ? ring_->names() : std::vector<std::string>{};
  }

 private:
  // The part of a round that moves bytes, after start and the update call: the source's tensors
  // into the ring, chunk by chunk, then a drain and the update's reply.
  void send_round(const std::vector<protocol::ParamMeta>& meta,
                  const protocol::ShmUpdateInfo& round, const protocol::ChunkPlan& plan,
                  std::uint64_t first_sequence, std::size_t window, AsyncCall& update);

  ShmTrainerInitInfo info_;
  std::unique_ptr<transport::ShmRing> ring_;
  std::uint64_t next_sequence_ = 1;
};

}  // namespace hotswap::trainer_sdk
