// KvCache: one sequence's attention keys and values, per layer, [kv_heads, capacity, head_dim],
// grown by doubling. `length` is how many positions are filled.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace hotswap::model_loader {

struct KvCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  std::int64_t length = 0;

  std::int64_t capacity() const { return keys.empty() ? 0 : keys[0].size(1); }
  void clear() {
    keys.clear();
    values.clear();
    length = 0;
  }
};

}  // namespace hotswap::model_loader
