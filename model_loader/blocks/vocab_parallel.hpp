// Vocab-parallel lookups: each rank holds a range of the vocabulary's rows of embed_tokens and
// lm_head, fills those, and the ranks sum (one rank: a plain lookup and product).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>

#include "model_loader/blocks/block_context.hpp"

namespace hotswap::model_loader {

// The embeddings of `ids` [N] from the table `embed`, in `dtype`.
at::Tensor embed_tokens(const BlockContext& ctx, const at::Tensor& ids, std::size_t embed,
                        const ShardRange& vocab, c10::ScalarType dtype);
// The logits [N, vocab_size] of `h` through `lm_head`, in float32.
at::Tensor vocab_logits(const BlockContext& ctx, const at::Tensor& h, std::size_t lm_head,
                        const ShardRange& vocab, std::int64_t vocab_size);

}  // namespace hotswap::model_loader
