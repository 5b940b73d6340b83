#include "model_loader/kv_block_pool.hpp"

#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>
#include <string>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

std::uint64_t KvBlockShape::block_bytes() const {
  const auto element = static_cast<std::uint64_t>(c10::elementSize(options.dtype().toScalarType()));
  return 2 * static_cast<std::uint64_t>(layers * block_size * kv_heads * head_dim) * element;
}

KvBlockPool::KvBlockPool(KvBlockShape shape, std::int64_t max_blocks, std::string budget)
    : shape_(std::move(shape)), max_blocks_(max_blocks), budget_(std::move(budget)) {
  if (shape_.block_size < 1) {
    throw protocol::ValueError("a KV cache block needs at least 1 position");
  }
  if (max_blocks_ < 1) {
    throw protocol::ValueError("the KV cache budget holds no block: one block of " +
                               std::to_string(shape_.block_size) + " positions takes " +
                               std::to_string(shape_.block_bytes()) +
                               " bytes (--kv-cache-memory-bytes, --block-size)");
  }
  // Block ids are int32 in the block tables.
  max_blocks_ = std::min<std::int64_t>(max_blocks_, std::numeric_limits<std::int32_t>::max());
}

std::int64_t KvBlockPool::free_blocks() const {
  std::lock_guard lock(mutex_);
  return static_cast<std::int64_t>(free_.size()) + (max_blocks_ - capacity_);
}

std::int64_t KvBlockPool::blocks_for(std::int64_t positions) const {
  return (positions + shape_.block_size - 1) / shape_.block_size;
}

void KvBlockPool::reserve(KvCache& cache, std::int64_t more) {
  if (auto held = cache.pool_.lock(); held && held.get() != this) {
    throw protocol::ValueError("this KV cache holds blocks of another model's cache");
  } else if (!held && !cache.blocks_.empty()) {
    throw protocol::ValueError("this KV cache holds blocks of a model that is gone");
  }
  const std::int64_t needed =
      blocks_for(cache.length + more) - static_cast<std::int64_t>(cache.blocks_.size());
  if (needed <= 0) return;
  std::lock_guard lock(mutex_);
  const auto available = static_cast<std::int64_t>(free_.size()) + (max_blocks_ - capacity_);
  if (needed > available) {
    throw protocol::RuntimeError(
        "the KV cache is full: a sequence needs " + std::to_string(needed) + " more blocks of " +
        std::to_string(shape_.block_size) + " positions, " + std::to_string(available) +
        " of the " + std::to_string(max_blocks_) +
        " the budget allows are free (--kv-cache-memory-bytes)");
  }
  if (static_cast<std::int64_t>(free_.size()) < needed) {
    grow(capacity_ + needed - static_cast<std::int64_t>(free_.size()));
  }
  cache.pool_ = weak_from_this();
  cache.block_size_ = shape_.block_size;
  for (std::int64_t i = 0; i < needed; ++i) {
    cache.blocks_.push_back(free_.back());
    free_.pop_back();
  }
}

void KvBlockPool::allocate_all() {
  std::lock_guard lock(mutex_);
  if (capacity_ < max_blocks_) grow(max_blocks_);
}

void KvBlockPool::grow(std::int64_t blocks) {
  const std::int64_t grown =
      std::min(max_blocks_, std::max<std::int64_t>({blocks, 2 * capacity_, 16}));
  const std::int64_t slots = grown * shape_.block_size;
  // Every layer is allocated before any is replaced: an allocation that fails leaves the pool
  // as it was.
  std::vector<at::Tensor> keys, values;
  for (std::int64_t l = 0; l < shape_.layers; ++l) {
    // Zeroed: a decode's masked slots get weight 0, and 0 times an uninitialized NaN is NaN.
    keys.push_back(at::zeros({slots, shape_.kv_heads, shape_.head_dim}, shape_.options));
    values.push_back(at::zeros({slots, shape_.kv_heads, shape_.head_dim}, shape_.options));
    if (capacity_ > 0) {
      const auto layer = static_cast<std::size_t>(l);
      const std::int64_t old = capacity_ * shape_.block_size;
      keys.back().narrow(0, 0, old).copy_(keys_[layer]);
      values.back().narrow(0, 0, old).copy_(values_[layer]);
    }
  }
  keys_ = std::move(keys);
  values_ = std::move(values);
  // New blocks go under the free ones, highest first, so the lowest is taken next.
  std::vector<std::int32_t> added;
  for (std::int64_t b = grown - 1; b >= capacity_; --b)
    added.push_back(static_cast<std::int32_t>(b));
  free_.insert(free_.begin(), added.begin(), added.end());
  capacity_ = grown;
}

void KvBlockPool::give_back(std::vector<std::int32_t>& blocks) noexcept {
  std::lock_guard lock(mutex_);
  // Reversed, so that a sequence's first block is the next one taken.
  free_.insert(free_.end(), blocks.rbegin(), blocks.rend());
}

}  // namespace hotswap::model_loader
