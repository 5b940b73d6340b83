// KvCache: one sequence's attention keys and values, per layer, [kv_heads, capacity, head_dim],
// grown by doubling. `length` is how many positions are filled.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace hotswap::model_loader {

struct KvCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  std::int64_t length = 0;
  // Set by a tensor-parallel model on the cache's first step: names it to the other ranks,
  // which keep their heads of it, and tells them to drop those when the cache goes.
  std::shared_ptr<const void> peer_tag;

  std::int64_t capacity() const { return keys.empty() ? 0 : keys[0].size(1); }
  void clear() {
    keys.clear();
    values.clear();
    length = 0;
  }

  // Makes room for `more` positions after `length` in each of `layers` layers of
  // [kv_heads, capacity, head_dim] `options` tensors, keeping what is filled. A forward step
  // reserves before it reads any weight, so it never reallocates mid-layer; the capacity at
  // least doubles (16 at first), so a generation reallocates O(log length) times.
  void reserve(std::int64_t more, std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
               const at::TensorOptions& options);
};

}  // namespace hotswap::model_loader
