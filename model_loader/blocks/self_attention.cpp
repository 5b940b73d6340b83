#include "model_loader/blocks/self_attention.hpp"

#include <cmath>

#include "model_loader/blocks/linear_layers.hpp"
#include "model_loader/blocks/rms_norm.hpp"
#include "model_loader/paged_attention.hpp"

namespace hotswap::model_loader {

at::Tensor self_attention(const BlockContext& ctx, const at::Tensor& x,
                          const SelfAttentionParams& p, const SelfAttentionShape& shape,
                          const ModelConfig& config, const KvBlockPool& pool, int layer,
                          const StepInputs& step) {
  const std::int64_t n = step.num_tokens, heads = shape.heads, kv_heads = shape.kv_heads;
  const std::int64_t hd = shape.head_dim;
  const double scaling = 1.0 / std::sqrt(static_cast<double>(hd));
  at::Tensor qkv = linear_with_bias(ctx, x, p.qkv, p.qkv_bias, step.lora);
  at::Tensor q = qkv.narrow(1, 0, heads * hd).reshape({n, heads, hd});
  at::Tensor k = qkv.narrow(1, heads * hd, kv_heads * hd).reshape({n, kv_heads, hd});
  at::Tensor v = qkv.narrow(1, (heads + kv_heads) * hd, kv_heads * hd).reshape({n, kv_heads, hd});
  if (p.q_norm != kNoParam) {
    q = rms_norm(ctx, q, p.q_norm, config.rms_norm_eps);
    k = rms_norm(ctx, k, p.k_norm, config.rms_norm_eps);
  }
  if (step.rope.cos.defined()) {
    q = RotaryEmbedding::rotate(q, step.rope);
    k = RotaryEmbedding::rotate(k, step.rope);
  }
  at::Tensor key_pool = pool.keys(layer), value_pool = pool.values(layer);
  write_kv(k, v, key_pool, value_pool, step.plan);
  at::Tensor attn = paged_attention(q, key_pool, value_pool, step.plan, pool.block_size(), scaling,
                                    config.sliding_window, shape.compute)
                        .reshape({n, heads * hd});
  return row_parallel(ctx, attn, p.o, p.o_bias, step.lora);
}

}  // namespace hotswap::model_loader
