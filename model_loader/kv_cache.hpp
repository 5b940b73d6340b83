// KvCache: one sequence's attention keys and values, per layer, [kv_heads, capacity, head_dim],
// grown by doubling. `length` is how many positions are filled.
#pragma once

#include <ATen/core/Tensor.h>

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
};

}  // namespace hotswap::model_loader
