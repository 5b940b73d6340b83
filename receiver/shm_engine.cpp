#include "receiver/shm_engine.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstring>

#include "protocol/chunk_plan.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::receiver {

void ShmWeightTransferEngine::init_transfer_channel(const protocol::ShmInitInfo& info) {
  ring_.reset();
  arena_.reset();
  auto ring = std::make_unique<transport::ShmRing>(transport::ShmRing::open(info.segment_names));
  if (ring->buffer_bytes() < static_cast<std::size_t>(info.packed_buffer_size_bytes)) {
    throw protocol::ValueError(
        "shared-memory buffers hold " + std::to_string(ring->buffer_bytes()) +
        " bytes but packed_buffer_size_bytes is " + std::to_string(info.packed_buffer_size_bytes));
  }
  std::unique_ptr<transport::ShmSegment> arena;
  if (info.arena_name) {
    arena = std::make_unique<transport::ShmSegment>(
        transport::ShmSegment::open(*info.arena_name, transport::ShmSegment::Access::kReadOnly));
  }
  ring_ = std::move(ring);
  arena_ = std::move(arena);
  names_ = info.segment_names;
  if (info.arena_name) names_.push_back(*info.arena_name);
}

void ShmWeightTransferEngine::unlink_dead_trainers_segments() {
  // A live trainer still owns its segments (it unlinks them itself, and other workers may yet
  // open them: its arena is its model); one that is gone cannot.
  for (const auto& name : names_) {
    if (!transport::ShmSegment::creator_alive(name)) transport::ShmSegment::unlink(name);
  }
}

void ShmWeightTransferEngine::shutdown() {
  unlink_dead_trainers_segments();
  names_.clear();
  ring_.reset();
  arena_.reset();
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
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!update_info.in_arena(i)) continue;
    const auto end = static_cast<std::uint64_t>(update_info.arena_offsets[i]) + params[i].nbytes();
    if (end > arena_->size()) {
      throw protocol::ValueError("'" + params[i].name + "' would end at byte " +
                                 std::to_string(end) + " of the shared weight arena " +
                                 arena_->name() + ", which holds " +
                                 std::to_string(arena_->size()));
    }
  }
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!update_info.in_arena(i)) continue;
    const auto& p = params[i];
    // Offsets are aligned for their dtype (protocol checked): a view, copied once by the model.
    at::Tensor view = at::from_blob(arena_->data() + update_info.arena_offsets[i], p.shape,
                                    at::TensorOptions().dtype(transport::to_scalar_type(p.dtype)));
    model().load_weights({{p.name, view.to(device())}});
    add_bytes_received(p.nbytes());
  }
}

void ShmWeightTransferEngine::receive_weights(const protocol::ShmUpdateInfo& update_info) {
  if (!ring_) {
    throw protocol::RuntimeError(
        "Shm weight transfer not initialized. Call init_transfer_engine() first.");
  }
  std::vector<std::size_t> indices;  // of each buffered tensor in update_info.params
  const auto plan =
      protocol::plan_ipc_chunks(update_info.buffered_params(&indices), ring_->buffer_bytes());
  load_from_arena(update_info);
  const auto timeout = context().timeout;
  try {
    for (std::size_t c = 0; c < plan.size(); ++c) {
      const auto sequence = static_cast<std::uint64_t>(update_info.first_sequence) + c;
      const std::uint8_t* chunk = ring_->acquire_for_read(sequence, timeout);
      std::vector<model_loader::NamedTensor> weights;
      for (const auto& slice : plan[c].slices) {
        const auto& p = update_info.params[indices[slice.param_index]];
        auto options = at::TensorOptions().dtype(transport::to_scalar_type(p.dtype));
        at::Tensor t;
        if (slice.offset % protocol::item_size(p.dtype) == 0 && slice.size > 0) {
          // A view of the shared buffer: the model copies it once, where it belongs.
          t = at::from_blob(const_cast<std::uint8_t*>(chunk) + slice.offset, p.shape, options);
        } else {
          t = at::empty(p.shape, options);  // misaligned for its dtype: copy out first
          if (slice.size > 0) std::memcpy(t.data_ptr(), chunk + slice.offset, slice.size);
        }
        weights.emplace_back(p.name, t.to(device()));
      }
      model().load_weights(weights);  // copies: only then may the trainer refill the buffer
      ring_->release(sequence);
      add_bytes_received(plan[c].size_bytes);
    }
  } catch (const protocol::TimeoutError&) {
    // The trainer stopped serving chunks: if it is gone, clear what it left behind.
    unlink_dead_trainers_segments();
    ring_.reset();
    arena_.reset();
    throw;
  }
}

}  // namespace hotswap::receiver
