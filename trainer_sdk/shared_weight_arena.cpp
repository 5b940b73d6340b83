#include "trainer_sdk/shared_weight_arena.hpp"

#include <unistd.h>

#include <ATen/ops/from_blob.h>

#include <atomic>

#include "protocol/errors.hpp"
#include "transport/arena_fence.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {
namespace {

std::size_t aligned(std::size_t bytes) {
  return (bytes + SharedWeightArena::kAlignment - 1) / SharedWeightArena::kAlignment *
         SharedWeightArena::kAlignment;
}

}  // namespace

SharedWeightArena::SharedWeightArena(std::size_t capacity_bytes) {
  if (capacity_bytes == 0) throw protocol::ValueError("a shared weight arena needs some capacity");
  static std::atomic<int> instances{0};
  const std::string name =
      "/hotswap-" + std::to_string(::getpid()) + "-arena-" + std::to_string(instances++);
  // The fence first (transport/arena_fence.hpp), then the tensors.
  segment_ = std::make_shared<transport::ShmSegment>(
      transport::ShmSegment::create(name, transport::ShmKind::kWeightArena,
                                    transport::ArenaFence::kBytes + aligned(capacity_bytes)));
  transport::ArenaFence::format(segment_->payload());
  used_ = transport::ArenaFence::kBytes;
}

std::size_t SharedWeightArena::capacity() const {
  return segment_->payload_size() - transport::ArenaFence::kBytes;
}

std::size_t SharedWeightArena::used() const {
  return used_ - transport::ArenaFence::kBytes;
}

std::uint8_t* SharedWeightArena::fence() const {
  return segment_->payload();
}

std::size_t SharedWeightArena::bytes_for(std::span<const protocol::ParamMeta> params) {
  std::size_t total = 0;
  for (const auto& p : params)
    total += aligned(p.nbytes());
  return total;
}

at::Tensor SharedWeightArena::allocate(const std::string& name, at::IntArrayRef shape,
                                       at::ScalarType dtype) {
  if (entries_.contains(name)) {
    throw protocol::ValueError("the shared weight arena already holds a tensor named '" + name +
                               "'");
  }
  protocol::ParamMeta meta{name, transport::from_scalar_type(dtype), shape.vec()};
  const std::size_t bytes = meta.nbytes();
  if (used() + bytes > capacity()) {
    throw protocol::ValueError("the shared weight arena " + this->name() + " has " +
                               std::to_string(capacity() - used()) + " bytes left, '" + name +
                               "' needs " + std::to_string(bytes));
  }
  // The deleter holds the mapping: a tensor outliving the arena object still reads valid memory.
  auto keep = segment_;
  at::Tensor t = at::from_blob(
      segment_->payload() + used_, shape, [keep](void*) {}, at::TensorOptions().dtype(dtype));
  entries_.emplace(name, Entry{static_cast<std::int64_t>(used_), meta, t});
  used_ += aligned(bytes);
  return t;
}

at::Tensor SharedWeightArena::copy_in(const std::string& name, const at::Tensor& tensor) {
  at::Tensor t = allocate(name, tensor.sizes(), tensor.scalar_type());
  t.copy_(tensor);
  return t;
}

const SharedWeightArena::Entry* SharedWeightArena::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

bool SharedWeightArena::holds(const std::string& name, const at::Tensor& tensor) const {
  const Entry* e = find(name);
  return e != nullptr && tensor.defined() && tensor.is_contiguous() &&
         tensor.data_ptr() == e->tensor.data_ptr() && tensor.sizes() == e->tensor.sizes() &&
         tensor.scalar_type() == e->tensor.scalar_type();
}

}  // namespace hotswap::trainer_sdk
