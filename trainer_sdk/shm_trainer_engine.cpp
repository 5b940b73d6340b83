#include "trainer_sdk/shm_trainer_engine.hpp"

#include <unistd.h>

#include <atomic>

#include "protocol/chunk_plan.hpp"
#include "protocol/shm_info.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "transport/arena_fence.hpp"

namespace hotswap::trainer_sdk {

ShmTrainerEngine::ShmTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                                   std::shared_ptr<WeightSource> source,
                                   const ShmTrainerInitInfo& info)
    : TrainerWeightTransferEngine(std::move(client), std::move(source), info.is_sender()),
      info_(info) {}

std::unique_ptr<ShmTrainerEngine> ShmTrainerEngine::trainer_init(
    const ShmTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  if (!source) throw protocol::ValueError("Shm trainer weight transfer requires a WeightSource.");
  if (info.num_workers < 1 || info.num_buffers < 1 || info.packed_buffer_size_bytes < 1) {
    throw protocol::ValueError("shm needs at least one worker, one buffer and a positive size");
  }
  auto engine = std::make_unique<ShmTrainerEngine>(client, source, info);
  if (!engine->is_sender()) return engine;
  static std::atomic<int> instances{0};
  const std::string base =
      "/hotswap-" + std::to_string(::getpid()) + "-" + std::to_string(instances++);
  std::vector<std::string> names;
  for (int i = 0; i < info.num_buffers; ++i)
    names.push_back(base + "-" + std::to_string(i));
  engine->ring_ = std::make_unique<transport::ShmRing>(transport::ShmRing::create(
      names, static_cast<std::size_t>(info.packed_buffer_size_bytes), info.num_workers));
  protocol::ShmInitInfo init{names, info.packed_buffer_size_bytes, std::nullopt};
  if (info.arena) init.arena_name = info.arena->name();
  const nlohmann::json payload = init.to_json();
  init_workers(client, payload, info.timeout);
  return engine;
}

void ShmTrainerEngine::send_weights() {
  auto meta = source()->metadata();
  if (!is_sender()) {
    iterate_without_sending();
    return;
  }
  if (!ring_) throw protocol::RuntimeError("the shm buffers are closed; call trainer_init again");
  // Before any RPC: which tensors the workers read in place, and the plan for the rest.
  protocol::ShmUpdateInfo round{meta, static_cast<std::int64_t>(next_sequence_), {}};
  if (const auto* arena = info_.arena.get()) {
    for (const auto& p : meta) {
      const auto* entry = arena->find(p.name);
      if (entry != nullptr && (entry->meta.dtype != p.dtype || entry->meta.shape != p.shape)) {
        throw protocol::ValueError(
            "'" + p.name + "' is " + std::string(protocol::dtype_name(entry->meta.dtype)) + " " +
            protocol::shape_to_string(entry->meta.shape) + " in the shared weight arena but " +
            std::string(protocol::dtype_name(p.dtype)) + " " + protocol::shape_to_string(p.shape) +
            " in the source's metadata");
      }
      round.arena_offsets.push_back(entry ? entry->offset : protocol::ShmUpdateInfo::kInBuffers);
    }
  }
  auto plan = protocol::plan_ipc_chunks(round.buffered_params(), ring_->buffer_bytes());
  // Through the cache-sized window where every worker joined it at the handshake (an older
  // worker does not), else whole chunks.
  const std::size_t window = stream_window_bytes();
  round.stream_window_bytes = static_cast<std::int64_t>(window);
  const nlohmann::json update_info = round.to_json();
  // The round's sequence numbers are taken before any byte moves: a round that fails part-way
  // leaves no chunk that a later round's could be mistaken for.
  const std::uint64_t first_sequence = next_sequence_;
  next_sequence_ += plan.size();

  run_round(round_version(), [&] {
    // The arena holds this round's bytes until the round ends, however it ends: a worker that
    // reads it late then fails its round instead of loading the next one's bytes.
    transport::FrozenArenaRound frozen(round.arena_offsets.empty() ? nullptr : info_.arena->fence(),
                                       first_sequence);
    auto shared_client = client_shared();
    AsyncCall update([shared_client, update_info] { shared_client->update_weights(update_info); });
    update.rethrow_if_failed();
    try {
      send_round(meta, round, plan, first_sequence, window, update);
    } catch (...) {
      // The workers are waiting for chunks that will not come: tell them, so that their
      // update_weights fails now rather than at their timeout, and the next round can start.
      ring_->abandon_below(next_sequence_);
      throw;
    }
  });
}

void ShmTrainerEngine::send_round(const std::vector<protocol::ParamMeta>& meta,
                                  const protocol::ShmUpdateInfo& round,
                                  const protocol::ChunkPlan& plan, std::uint64_t first_sequence,
                                  std::size_t window, AsyncCall& update) {
  CheckedStream stream(source()->iter(), meta);
  // The next tensor and its index; one in the arena is only checked: the workers read it there.
  auto take = [&] {
    const std::size_t index = stream.position();
    at::Tensor t = stream.next();
    if (round.in_arena(index) && !info_.arena->holds(meta[index].name, t)) {
      throw protocol::ValueError(
          "the source yielded '" + meta[index].name +
          "' from outside the shared weight arena it was allocated in; "
          "the workers read the arena's copy, so it must be the same tensor");
    }
    return std::pair{index, t};
  };
  auto next_buffered = [&] {
    for (;;) {
      auto [index, t] = take();
      if (!round.in_arena(index)) return t;
    }
  };
  for (std::size_t c = 0; c < plan.size(); ++c) {
    const std::uint64_t sequence = first_sequence + c;
    ring_->acquire_for_write(sequence, info_.timeout);
    for (const auto& slice : plan[c].slices) {
      at::Tensor t = next_buffered();
      // Piece by piece, each made visible as it lands: the workers copy out right behind.
      ring_->copy_in(sequence, slice.offset, static_cast<const std::uint8_t*>(t.data_ptr()),
                     slice.size, window, info_.timeout, [&] { update.rethrow_if_failed(); });
    }
    ring_->publish(sequence);
    reach_mid_update();
    // A worker that failed stops reading: surface its reason rather than wait for a timeout.
    update.rethrow_if_failed();
  }
  if (plan.empty()) reach_mid_update();  // every tensor read in place
  while (stream.position() < meta.size())
    take();  // the arena tensors after the last buffered one
  stream.finish();
  ring_->drain(info_.timeout);
  update.wait(info_.timeout, "update_weights");
}

}  // namespace hotswap::trainer_sdk
