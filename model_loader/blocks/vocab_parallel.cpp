#include "model_loader/blocks/vocab_parallel.hpp"

#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/zeros.h>

#include "model_loader/blocks/linear_layers.hpp"

namespace hotswap::model_loader {

// Row lookups index (rather than index_select) so that the meta device, which tests use to check
// that every tensor follows the model's device, can run a step too.
at::Tensor embed_tokens(const BlockContext& ctx, const at::Tensor& ids, std::size_t embed,
                        const ShardRange& vocab, c10::ScalarType dtype) {
  const at::Tensor& table = ctx.store[embed].value;
  if (vocab.whole()) return table.index({ids}).to(dtype);
  // Rows this rank holds are looked up; the rest are zeros, which the sum fills in exactly.
  at::Tensor local = ids - vocab.start;
  at::Tensor held = (local >= 0).logical_and(local < vocab.size);
  at::Tensor rows = table.index({local.masked_fill(held.logical_not(), 0)}).to(dtype);
  rows = rows.masked_fill(held.logical_not().unsqueeze(1), 0);
  ctx.queue_all_reduce(rows);
  return rows;
}

at::Tensor vocab_logits(const BlockContext& ctx, const at::Tensor& h, std::size_t lm_head,
                        const ShardRange& vocab, std::int64_t vocab_size) {
  at::Tensor local = linear(ctx, h, lm_head, at::kFloat);
  if (vocab.whole()) return local;
  at::Tensor full = at::zeros({h.size(0), vocab_size}, local.options());
  full.narrow(1, vocab.start, vocab.size).copy_(local);
  ctx.queue_all_reduce(full);
  return full;
}

}  // namespace hotswap::model_loader
