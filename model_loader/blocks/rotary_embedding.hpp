// RotaryEmbedding: rotary position embedding as Hugging Face computes it, with Llama 3.1's
// frequency-dependent scaling where config.json asks for it. The angles of a step's positions are
// made once per step (tables) and applied to every layer's queries and keys (rotate).
#pragma once

#include <ATen/core/Tensor.h>

#include "model_loader/model_config.hpp"

namespace hotswap::model_loader {

class RotaryEmbedding {
 public:
  // cos and sin of the rotary angles at a step's positions, [N, 1, head_dim] in the compute dtype.
  struct Tables {
    at::Tensor cos, sin;
  };

  // The inverse frequencies live on `device`: a table on the CPU would be copied over at every
  // step if it were not.
  RotaryEmbedding(const ModelConfig& config, c10::Device device, c10::ScalarType compute_dtype);

  Tables tables(const at::Tensor& positions) const;
  // Every position's angles below `max_position` as the GPU's rotary kernel reads them
  // (StepKernelShape::cos_sin): float32 [max_position, head_dim], the cos of each frequency, then
  // its sin.
  at::Tensor cos_sin_table(std::int64_t max_position) const;
  // x [N, heads, head_dim] rotated by the tables: x cos + rotate_half(x) sin.
  static at::Tensor rotate(const at::Tensor& x, const Tables& tables);

 private:
  at::Tensor inv_freq_;  // float32 [head_dim / 2]
  c10::ScalarType compute_dtype_;
};

}  // namespace hotswap::model_loader
