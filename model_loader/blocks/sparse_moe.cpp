#include "model_loader/blocks/sparse_moe.hpp"

#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/bincount.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/zeros_like.h>

#include "model_loader/blocks/gated_mlp.hpp"
#include "model_loader/blocks/linear_layers.hpp"
#include "model_loader/linear.hpp"

namespace hotswap::model_loader {

// As transformers computes it: the router's softmax over the experts in float32, the top k per
// token (rescaled to sum to 1 where the config says so), then each expert that any token chose
// runs once, on exactly the tokens routed to it; its output, scaled by each token's weight, is
// added back in expert order, as transformers adds it.
at::Tensor sparse_moe(const BlockContext& ctx, const at::Tensor& x, const SparseMoeParams& p,
                      const ModelConfig& c) {
  const auto mine = ctx.tp.local_experts(c.num_experts);
  const bool by_experts = mine.count != c.num_experts;
  const std::int64_t k = c.num_experts_per_tok;
  const std::int64_t inter =
      by_experts ? c.moe_intermediate_size : c.moe_intermediate_size / ctx.tp.size;
  // Router logits straight to float32 (transformers rounds them to the activations' dtype
  // first): a near-tie between two experts is then decided as float32 compute decides it.
  at::Tensor probs = at::softmax(linear(ctx, x, p.router, at::kFloat), -1);
  auto [weights, chosen] = probs.topk(k, -1);  // [tokens, k]
  if (c.norm_topk_prob) weights = weights / weights.sum(-1, /*keepdim=*/true);
  if (!c.router_weights_float32) weights = weights.to(x.scalar_type());

  // The (token, slot) pairs grouped by expert: one sort, and how many each expert got.
  at::Tensor flat = chosen.reshape({-1});
  at::Tensor order = std::get<1>(flat.sort());
  at::Tensor token_of = at::floor_divide(order, k);
  at::Tensor weight_of = weights.reshape({-1}).index({order}).unsqueeze(1);
  // The counts come to the host, which waits for the stream, and so for the all-reduces queued
  // on it: waited for here first, against the collective timeout, never without one.
  ctx.finish_collectives();
  at::Tensor counts = at::bincount(flat, {}, c.num_experts).to(at::kCPU);
  const auto* count = counts.data_ptr<std::int64_t>();

  const at::Tensor& w13 = ctx.store[p.w13].value;
  const at::Tensor& w2 = ctx.store[p.w2].value;
  // Experts' outputs add up in float32 and are rounded once.
  at::Tensor out = at::zeros_like(x, x.options().dtype(at::kFloat));
  std::int64_t start = 0;
  for (std::int64_t e = 0; e < c.num_experts; start += count[e], ++e) {
    if (count[e] == 0 || !mine.holds(e)) continue;  // another rank's expert runs there
    at::Tensor tokens = token_of.narrow(0, start, count[e]);
    const std::int64_t local = e - mine.first;
    at::Tensor m = silu_and_mul(apply_linear(x.index({tokens}), w13[local]), inter);
    at::Tensor y = apply_linear(m, w2[local]);
    out.index_add_(0, tokens, (y * weight_of.narrow(0, start, count[e])).to(at::kFloat));
  }
  // Each rank ran its slice of every expert's width, or (expert parallelism) its own experts.
  ctx.queue_all_reduce(out);
  return out.to(x.scalar_type());
}

}  // namespace hotswap::model_loader
