// BlockContext: what every shared model block reads (model_loader/blocks/): the parameters the
// model holds, by index; this rank of the tensor-parallel group; and the step's collectives, which
// are queued on the device and waited for once, against the collective timeout. A family's model
// makes one from its ServableRuntime; the blocks then compose into its forward, as llama.cpp's
// build_norm / build_attn / build_ffn / build_moe_ffn do.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>

#include "model_loader/parameter_store.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

// A parameter a layer does not have (a bias it lacks, a dense layer's router).
inline constexpr std::size_t kNoParam = static_cast<std::size_t>(-1);

struct BlockContext {
  const ParameterStore& store;
  TensorParallelRank tp;
  // Sums `t` over the ranks in place, queued on the device (ServableRuntime::queue_all_reduce).
  std::function<void(at::Tensor&)> queue_all_reduce;
  // Waits for what was queued, against the collective timeout, before the host reads a result.
  std::function<void()> finish_collectives;
};

}  // namespace hotswap::model_loader
