#include "model_loader/blocks/rotary_embedding.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/pow.h>
#include <ATen/ops/where.h>

#include <numbers>

namespace hotswap::model_loader {
namespace {

// HF's inverse frequencies, with Llama 3.1's frequency-dependent scaling when configured.
at::Tensor rope_inverse_frequencies(const ModelConfig& c) {
  at::Tensor exponents =
      at::arange(0, c.head_dim, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat) /
      static_cast<double>(c.head_dim);
  at::Tensor inv_freq = 1.0 / at::pow(c.rope_theta, exponents);
  if (!c.rope_scaling) return inv_freq;
  const auto& s = *c.rope_scaling;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  at::Tensor wavelen = 2.0 * std::numbers::pi / inv_freq;
  at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  at::Tensor smooth =
      (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
  return at::where(medium, smoothed, scaled);
}

// HF's rotate_half: (x1, x2) → (-x2, x1) over the two halves of the last dimension.
at::Tensor rotate_half(const at::Tensor& x) {
  auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

RotaryEmbedding::RotaryEmbedding(const ModelConfig& config, c10::Device device,
                                 c10::ScalarType compute_dtype)
    : inv_freq_(rope_inverse_frequencies(config).to(device)), compute_dtype_(compute_dtype) {}

RotaryEmbedding::Tables RotaryEmbedding::tables(const at::Tensor& positions) const {
  // As HF computes them: the angles of this step's positions in float32 on the model's device
  // (a few kilobytes, cheaper than a cached table's lookup), rotated in the activations' dtype.
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq_.unsqueeze(0);
  at::Tensor angles = at::cat({freqs, freqs}, -1);
  return {angles.cos().to(compute_dtype_).unsqueeze(1),
          angles.sin().to(compute_dtype_).unsqueeze(1)};
}

at::Tensor RotaryEmbedding::cos_sin_table(std::int64_t max_position) const {
  at::Tensor positions = at::arange(max_position, inv_freq_.options().dtype(at::kLong));
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq_.unsqueeze(0);
  return at::cat({freqs.cos(), freqs.sin()}, -1).contiguous();
}

at::Tensor RotaryEmbedding::rotate(const at::Tensor& x, const Tables& tables) {
  return x * tables.cos + rotate_half(x) * tables.sin;
}

}  // namespace hotswap::model_loader
