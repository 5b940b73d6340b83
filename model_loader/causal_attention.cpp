#include "model_loader/causal_attention.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/softmax.h>

#include <algorithm>
#include <limits>
#include <vector>

namespace hotswap::model_loader {

at::Tensor causal_attention(const at::Tensor& queries, const at::Tensor& keys,
                            const at::Tensor& values, std::int64_t start, double scaling,
                            std::optional<std::int64_t> sliding_window, std::int64_t max_scores) {
  const std::int64_t heads = queries.size(0), len = queries.size(1), total = keys.size(1);
  const std::int64_t rows =
      std::max<std::int64_t>(1, max_scores / std::max<std::int64_t>(1, heads * total));
  const auto longs = at::TensorOptions().dtype(at::kLong).device(queries.device());
  at::Tensor key_pos;  // made on the first chunk that needs a mask (a decode step needs none)
  const at::Tensor keys_t = keys.transpose(1, 2);
  std::vector<at::Tensor> chunks;
  for (std::int64_t first = 0; first < len; first += rows) {
    const std::int64_t count = std::min(rows, len - first);
    at::Tensor scores =
        at::matmul(queries.narrow(1, first, count), keys_t).to(at::kFloat) * scaling;
    // A single query at the last position sees every key, unless a window hides the oldest.
    if (count > 1 || start + first + 1 < total || sliding_window) {
      if (!key_pos.defined()) key_pos = at::arange(total, longs);
      at::Tensor query_pos = at::arange(start + first, start + first + count, longs).unsqueeze(1);
      at::Tensor blocked = key_pos.unsqueeze(0) > query_pos;
      if (sliding_window) {
        blocked = blocked | (query_pos - key_pos.unsqueeze(0) >= *sliding_window);
      }
      scores.masked_fill_(blocked.unsqueeze(0), -std::numeric_limits<float>::infinity());
    }
    chunks.push_back(at::matmul(at::softmax(scores, -1).to(queries.scalar_type()), values));
  }
  return chunks.size() == 1 ? chunks[0] : at::cat(chunks, 1);
}

}  // namespace hotswap::model_loader
