// KvBlockPool: a model's paged KV cache, vLLM's PagedAttention layout on libtorch tensors. The
// keys and values of every sequence live in fixed-size blocks of `block_size` positions, one
// tensor per layer for keys and one for values, [blocks * block_size, kv_heads, head_dim]: slot
// b * block_size + i is position i of block b. A sequence holds a list of blocks (KvCache), taken
// as it grows and given back when it ends, so memory follows the positions in use, not the
// longest sequence, and a budget bounds it: at most `max_blocks`, after which a step must free
// some (preempt a sequence) before it can grow another.
//
// The tensors grow on demand up to the budget (doubling, so a worker that serves little holds
// little); a step reserves its blocks before it reads a weight, so they never grow mid-layer.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "model_loader/kv_cache.hpp"

namespace hotswap::model_loader {

struct KvBlockShape {
  std::int64_t layers = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t block_size = 16;
  at::TensorOptions options;  // dtype and device of the keys and values

  // Bytes one block takes: keys and values of every layer.
  std::uint64_t block_bytes() const;
};

class KvBlockPool : public std::enable_shared_from_this<KvBlockPool> {
 public:
  // At most `max_blocks` blocks; none are allocated until a step needs them. A budget of no
  // block is a ValueError naming a block's size.
  // `budget`: where the budget came from, one line for the start-up log (kv_cache_budget.hpp).
  KvBlockPool(KvBlockShape shape, std::int64_t max_blocks, std::string budget = {});

  const KvBlockShape& shape() const { return shape_; }
  std::int64_t block_size() const { return shape_.block_size; }
  std::int64_t max_blocks() const { return max_blocks_; }
  const std::string& budget() const { return budget_; }
  // Blocks a reserve can still take: free ones, and those the budget has not allocated yet.
  std::int64_t free_blocks() const;
  // Allocates every block of the budget now. On a GPU whose budget is what the device has left
  // (kv_cache_budget.hpp), growing on demand would need the old and the new tensors at once;
  // and a CUDA graph needs the cache where it was captured.
  void allocate_all();
  // Blocks that hold `positions` positions.
  std::int64_t blocks_for(std::int64_t positions) const;

  // Gives `cache` the blocks for `more` positions after its length. When the budget lacks them,
  // a RuntimeError names the need and the budget, and the cache keeps what it held. A cache of
  // another pool is a logic error (a ValueError).
  void reserve(KvCache& cache, std::int64_t more);

  // Layer `layer`'s keys and values, [capacity * block_size, kv_heads, head_dim]. Valid until
  // the next reserve, which may grow them.
  const at::Tensor& keys(std::int64_t layer) const {
    return keys_[static_cast<std::size_t>(layer)];
  }
  const at::Tensor& values(std::int64_t layer) const {
    return values_[static_cast<std::size_t>(layer)];
  }

 private:
  friend class KvCache;
  void give_back(std::vector<std::int32_t>& blocks) noexcept;
  // Grows the tensors to hold at least `blocks` blocks (at most max_blocks_), keeping contents.
  void grow(std::int64_t blocks);

  KvBlockShape shape_;
  std::int64_t max_blocks_;
  std::string budget_;
  std::int64_t capacity_ = 0;  // blocks the tensors hold
  std::vector<at::Tensor> keys_, values_;
  // Free blocks, lowest last (taken from the back, so a sequence's blocks tend to be in order).
  // Guarded: a cache may be dropped on any thread (a cancelled request), while steps run on one.
  mutable std::mutex mutex_;
  std::vector<std::int32_t> free_;
};

}  // namespace hotswap::model_loader
