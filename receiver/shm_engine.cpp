#include "receiver/shm_engine.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstring>

#include "protocol/chunk_plan.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::receiver {

void ShmWeightTransferEngine::init_transfer_channel(const protocol::ShmInitInfo& info) {
  ring_.reset();
  auto ring = std::make_unique<transport::ShmRing>(transport::ShmRing::open(info.segment_names));
  if (ring->buffer_bytes() < static_cast<std::size_t>(info.packed_buffer_size_bytes)) {
    throw protocol::ValueError(
        "shared-memory buffers hold " + std::to_string(ring->buffer_bytes()) +
        " bytes but packed_buffer_size_bytes is " + std::to_string(info.packed_buffer_size_bytes));
  }
  ring_ = std::move(ring);
  names_ = info.segment_names;
}

void ShmWeightTransferEngine::shutdown() {
  for (const auto& name : names_)
    transport::ShmSegment::unlink(name);
  names_.clear();
  ring_.reset();
}

void ShmWeightTransferEngine::receive_weights(const protocol::ShmUpdateInfo& update_info) {
  if (!ring_) {
    throw protocol::RuntimeError(
        "Shm weight transfer not initialized. Call init_transfer_engine() first.");
  }
  const auto plan = protocol::plan_ipc_chunks(update_info.params, ring_->buffer_bytes());
  const auto timeout = context().timeout;
  try {
    for (std::size_t c = 0; c < plan.size(); ++c) {
      const auto sequence = static_cast<std::uint64_t>(update_info.first_sequence) + c;
      const std::uint8_t* chunk = ring_->acquire_for_read(sequence, timeout);
      std::vector<model_loader::NamedTensor> weights;
      for (const auto& slice : plan[c].slices) {
        const auto& p = update_info.params[slice.param_index];
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
    // The trainer stopped serving chunks: presume it dead, and clear what it left behind.
    for (const auto& name : names_)
      transport::ShmSegment::unlink(name);
    ring_.reset();
    throw;
  }
}

}  // namespace hotswap::receiver
