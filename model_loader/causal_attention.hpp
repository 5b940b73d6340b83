// Causal (and sliding-window) attention of a step's queries over a sequence's keys, in chunks of
// queries so that peak memory grows linearly with the prompt, not with its square.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace hotswap::model_loader {

// The most attention scores (query rows x keys x heads) one chunk of queries computes at once:
// 16 Mi floats, 64 MiB. A prefill's scores, probabilities and mask grew with the square of the
// prompt (a 4k-token prompt took about 500 MB on a tiny model; a 16k one would take GBs per
// layer); in chunks of queries they stay under this bound.
inline constexpr std::int64_t kAttentionScoreBudget = std::int64_t{16} << 20;

// Attention of `queries` [heads, len, hd] at positions start..start + len over `keys` and
// `values` [heads, start + len, hd] (a query sees the keys up to its own position, and with a
// sliding window only the last `sliding_window` of them), returned as [heads, len, hd] in the
// queries' dtype. Scores and softmax run in float32, `max_scores` of them at a time (at least
// one query row per chunk); the mask of each chunk is made for that chunk alone.
at::Tensor causal_attention(const at::Tensor& queries, const at::Tensor& keys,
                            const at::Tensor& values, std::int64_t start, double scaling,
                            std::optional<std::int64_t> sliding_window,
                            std::int64_t max_scores = kAttentionScoreBudget);

}  // namespace hotswap::model_loader
