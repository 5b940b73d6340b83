// SharedWeightArena: a trainer's weights kept in one POSIX shared-memory segment, so that `shm`
// workers on the same host copy them straight into their models. Through the packed buffers
// every byte is copied twice (trainer → buffer → model); from the arena, once — the CPU
// counterpart of `ipc` exporting the trainer's own CUDA tensors.
//
// A trainer allocates its parameters here (allocate, or copy_in for existing tensors), trains
// them in place, and hands the arena to ShmTrainerInitInfo::arena. Each round, a tensor the
// source yields by a name registered here travels as an offset; the rest go through the buffers.
// The tensors keep the mapping alive, and the segment's name is unlinked once the arena and all
// its tensors are gone (or by a worker that outlives a trainer that died). The data area starts
// with the arena's fence: the round whose bytes workers may read (transport/arena_fence.hpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "protocol/param_meta.hpp"
#include "transport/shm_segment.hpp"

namespace hotswap::trainer_sdk {

class SharedWeightArena {
 public:
  static constexpr std::size_t kAlignment = 64;  // every tensor starts on a cache line

  // Creates the segment ("/hotswap-<pid>-arena-<n>", 0600) with room for `capacity_bytes`.
  explicit SharedWeightArena(std::size_t capacity_bytes);
  // The room these tensors need, alignment included: an arena sized for a model.
  static std::size_t bytes_for(std::span<const protocol::ParamMeta> params);

  // An uninitialized contiguous tensor in the arena, registered under `name` (the name the
  // trainer's WeightSource yields it by). ValueError if the name is taken or it does not fit.
  at::Tensor allocate(const std::string& name, at::IntArrayRef shape, at::ScalarType dtype);
  // allocate, then copy `tensor` in.
  at::Tensor copy_in(const std::string& name, const at::Tensor& tensor);

  // Where `name`'s tensor lives, if it was allocated here.
  struct Entry {
    std::int64_t offset;  // in the data area, after the segment's header
    protocol::ParamMeta meta;
    at::Tensor tensor;
  };
  const Entry* find(const std::string& name) const;
  // Whether `tensor` is exactly the arena's tensor for `name`: the same bytes, contiguous.
  bool holds(const std::string& name, const at::Tensor& tensor) const;

  const std::string& name() const { return segment_->name(); }
  std::size_t capacity() const;  // bytes for tensors
  std::size_t used() const;      // of those, alignment included
  // The arena's fence (transport/arena_fence.hpp): its first bytes, before any tensor (whose
  // offsets count from the start of the data area, fence included).
  std::uint8_t* fence() const;

 private:
  std::shared_ptr<transport::ShmSegment> segment_;
  std::size_t used_ = 0;  // from the data area's start: the fence, then the tensors
  std::map<std::string, Entry> entries_;
};

}  // namespace hotswap::trainer_sdk
