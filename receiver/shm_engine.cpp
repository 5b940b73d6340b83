#include "receiver/shm_engine.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <algorithm>

#include "protocol/chunk_plan.hpp"
#include "transport/arena_fence.hpp"
#include "transport/byte_copy.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::receiver {
namespace {

// A view of `bytes` in a trainer's segment. The segment is mapped under a BusFaultGuard, so the
// model's copy out of it (on whatever threads libtorch uses) cannot crash this process; the
// caller checks the segment afterwards.
at::Tensor view_of(const std::uint8_t* bytes, const protocol::ParamMeta& p) {
  return at::from_blob(const_cast<std::uint8_t*>(bytes), p.shape,
                       at::TensorOptions().dtype(transport::to_scalar_type(p.dtype)));
}

}  // namespace

at::Tensor ShmWeightTransferEngine::for_model(const at::Tensor& host) const {
  // A tensor-parallel rank keeps a slice of each tensor: handed the host tensor, the model
  // copies only that slice to its device. At tp = 1 the whole tensor goes over first, so any
  // dtype conversion runs on the device.
  if (context().parallel.tensor_parallel_size > 1) return host;
  return host.to(device());
}

ShmWeightTransferEngine::~ShmWeightTransferEngine() {
  watch_.reset();  // before the segments it may unlink go
}

void ShmWeightTransferEngine::init_transfer_channel(const protocol::ShmInitInfo& info) {
  // A trainer killed before it ever reached a worker leaves segments nobody named: sweep.
  transport::ShmSegment::remove_orphans();
  auto ring = std::make_unique<transport::ShmRing>(transport::ShmRing::open(info.segment_names));
  if (ring->buffer_bytes() < static_cast<std::size_t>(info.packed_buffer_size_bytes)) {
    throw protocol::ValueError(
        "shared-memory buffers hold " + std::to_string(ring->buffer_bytes()) +
        " bytes but packed_buffer_size_bytes is " + std::to_string(info.packed_buffer_size_bytes));
  }
  std::unique_ptr<transport::ShmSegment> arena;
  if (info.arena_name) {
    arena = std::make_unique<transport::ShmSegment>(
        transport::ShmSegment::open(*info.arena_name, transport::ShmKind::kWeightArena,
                                    transport::ShmSegment::Access::kReadOnly));
    if (arena->creator().pid != ring->creator().pid ||
        arena->creator().start_time != ring->creator().start_time) {
      throw protocol::ValueError("the shared weight arena " + *info.arena_name +
                                 " was made by another process (pid " +
                                 std::to_string(arena->creator().pid) + ") than the buffers (pid " +
                                 std::to_string(ring->creator().pid) + ")");
    }
  }
  close_channel();  // the previous trainer's, its segments unlinked if it is gone
  // Last, once nothing above can refuse the handshake: a trainer streams rounds through the
  // window only when every worker has joined it.
  ring->join_window();
  ring_ = std::move(ring);
  arena_ = std::move(arena);
  trainer_gone_ = false;
  // Unlink what the trainer made the moment it is gone, whatever this worker is doing then.
  std::vector<std::string> names = info.segment_names;
  if (info.arena_name) names.push_back(*info.arena_name);
  watch_ = std::make_unique<transport::ProcessWatch>(ring_->creator(), [this, names] {
    trainer_gone_ = true;
    for (const auto& name : names)
      transport::ShmSegment::unlink_if_orphaned(name);
  });
}

void ShmWeightTransferEngine::close_channel() {
  watch_.reset();
  std::vector<std::string> names;
  if (ring_) names = ring_->names();
  if (arena_) names.push_back(arena_->name());
  ring_.reset();
  arena_.reset();
  for (const auto& name : names)
    transport::ShmSegment::unlink_if_orphaned(name);
}

void ShmWeightTransferEngine::shutdown() {
  close_channel();
  transport::ShmSegment::remove_orphans();
}

void ShmWeightTransferEngine::load_from_arena(const protocol::ShmUpdateInfo& update_info) {
  const auto& params = update_info.params;
  if (!arena_) {
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (update_info.in_arena(i)) {
        throw protocol::ValueError("update_info places '" + params[i].name +
                                   "' in a shared weight arena, but the handshake named none "
                                   "(no `arena_name`)");
      }
    }
    return;
  }
  // Every offset is checked before any byte moves: a bad one loses nothing.
  bool reads_arena = false;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!update_info.in_arena(i)) continue;
    reads_arena = true;
    const auto offset = static_cast<std::uint64_t>(update_info.arena_offsets[i]);
    const std::uint64_t size = arena_->payload_size();
    if (offset > size || params[i].nbytes() > size - offset) {
      throw protocol::ValueError("'" + params[i].name + "' at byte " + std::to_string(offset) +
                                 " would run past the end of the shared weight arena " +
                                 arena_->name() + ", which holds " + std::to_string(size));
    }
  }
  // A round that reads nothing in the arena does not depend on what it holds.
  if (!reads_arena) return;
  // The arena must hold this round's bytes from before the first copy to after the last
  // (transport/arena_fence.hpp): a trainer that moved on fails the round, never mixes versions.
  const auto round = static_cast<std::uint64_t>(update_info.first_sequence);
  const auto fence = transport::ArenaFence::check_before(arena_->payload(), arena_->payload_size(),
                                                         round, arena_->name());
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!update_info.in_arena(i)) continue;
    // Offsets are aligned for their dtype (protocol checked): a view, copied once by the model.
    const auto& p = params[i];
    model().load_weights(
        {{p.name, for_model(view_of(arena_->payload() + update_info.arena_offsets[i], p))}});
    arena_->check_intact();  // zeros read from a shrunk arena are never weights
    add_bytes_received(p.nbytes());
  }
  transport::ArenaFence::check_after(arena_->payload(), arena_->payload_size(), fence, round,
                                     arena_->name());
}

void ShmWeightTransferEngine::receive_slice(std::uint64_t sequence,
                                            const protocol::ChunkSlice& slice,
                                            const protocol::ParamMeta& p, std::size_t window) {
  const auto type = transport::to_scalar_type(p.dtype);
  auto destination = model().destination_for(p.name, type, p.shape);
  const bool into_rows =
      destination && destination->device().is_cpu() && destination->is_contiguous();
  if (into_rows || window > 0) {
    // Piece by piece right behind the trainer: straight into the staged rows, or (through a
    // window, where the chunk never lies whole in the buffer) into a tensor of its own for the
    // model to convert.
    at::Tensor t = into_rows ? *destination : at::empty(p.shape, at::TensorOptions().dtype(type));
    ring_->copy_out(sequence, slice.offset, static_cast<std::uint8_t*>(t.data_ptr()), slice.size,
                    window, context().timeout, &trainer_gone_);
    if (into_rows) {
      model().mark_received(p.name);
    } else {
      model().load_weights({{p.name, for_model(t)}});
    }
    return;
  }
  // A whole chunk: the model reads the tensor where it lies and copies it once.
  const std::uint8_t* chunk = ring_->acquire_for_read(sequence, slice.offset + slice.size,
                                                      context().timeout, &trainer_gone_);
  at::Tensor t;
  if (slice.offset % protocol::item_size(p.dtype) == 0 && slice.size > 0) {
    t = view_of(chunk + slice.offset, p);  // the model copies it once, where it belongs
  } else {
    // Misaligned for its dtype: copied out first.
    t = at::empty(p.shape, at::TensorOptions().dtype(type));
    if (slice.size > 0) transport::copy_bytes(t.data_ptr(), chunk + slice.offset, slice.size);
  }
  model().load_weights({{p.name, for_model(t)}});
}

void ShmWeightTransferEngine::receive_weights(const protocol::ShmUpdateInfo& update_info) {
  if (!ring_) {
    throw protocol::RuntimeError(
        "Shm weight transfer not initialized. Call init_transfer_engine() first.");
  }
  try {
    // A segment shrunk since the handshake fails the round before anything is read.
    ring_->check_intact();
    if (arena_) arena_->check_intact();
    std::vector<std::size_t> indices;  // of each buffered tensor in update_info.params
    const auto plan =
        protocol::plan_ipc_chunks(update_info.buffered_params(&indices), ring_->buffer_bytes());
    const auto window = static_cast<std::size_t>(update_info.stream_window_bytes);
    if (window > 0) ring_->check_window(window);  // before any byte moves
    load_from_arena(update_info);
    for (std::size_t c = 0; c < plan.size(); ++c) {
      const auto sequence = static_cast<std::uint64_t>(update_info.first_sequence) + c;
      for (const auto& slice : plan[c].slices) {
        const auto& p = update_info.params[indices[slice.param_index]];
        receive_slice(sequence, slice, p, window);
      }
      // Once a chunk, not once a tensor (an fstat each): zeros read from a shrunk buffer fail
      // the round here, and a failed round's staged tensors are dropped.
      ring_->check_intact();
      ring_->release(sequence);  // only now may the trainer refill the buffer
      add_bytes_received(plan[c].size_bytes);
    }
  } catch (const protocol::ValueError&) {
    throw;  // a bad round; the channel is fine
  } catch (...) {
    // A trainer that died, stalled or broke its segments: this handshake is over. Its
    // segments go now if it is gone (else with it, through the watch); a segment that faulted
    // reads zeros from now on, so its mapping goes too.
    const bool faulted = ring_ && (ring_->faulted() || (arena_ && arena_->faulted()));
    if (faulted || trainer_gone_ || !watch_ || !watch_->process().alive()) close_channel();
    throw;
  }
}

}  // namespace hotswap::receiver
