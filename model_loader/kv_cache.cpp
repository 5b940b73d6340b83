#include "model_loader/kv_cache.hpp"

#include <ATen/ops/zeros.h>

#include <algorithm>

namespace hotswap::model_loader {

void KvCache::reserve(std::int64_t more, std::int64_t layers, std::int64_t kv_heads,
                      std::int64_t head_dim, const at::TensorOptions& options) {
  const std::int64_t needed = length + more;
  if (needed <= capacity()) return;
  std::int64_t grown = std::max<std::int64_t>({needed, 2 * capacity(), 16});
  for (std::int64_t l = 0; l < layers; ++l) {
    at::Tensor k = at::zeros({kv_heads, grown, head_dim}, options);
    at::Tensor v = at::zeros({kv_heads, grown, head_dim}, options);
    const auto layer = static_cast<std::size_t>(l);
    if (length > 0) {
      k.narrow(1, 0, length).copy_(keys[layer].narrow(1, 0, length));
      v.narrow(1, 0, length).copy_(values[layer].narrow(1, 0, length));
    }
    if (keys.size() <= layer) {
      keys.push_back(k);
      values.push_back(v);
    } else {
      keys[layer] = k;
      values[layer] = v;
    }
  }
}

}  // namespace hotswap::model_loader
