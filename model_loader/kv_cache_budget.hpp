// The KV cache's share of a GPU, as vLLM budgets it: of the device's memory, the fraction
// --gpu-memory-utilization (0.9 by default) goes to this worker, and what its weights, a staged
// update's shadow copy of them, a step's activations and the CUDA graphs' pool leave of that
// is the KV cache's. An explicit --kv-cache-memory-bytes is taken as it is instead, as in vLLM;
// on the CPU the cache takes that flag's value (4 GiB by default).
//
// The cache's blocks are then allocated as sequences grow, up to that budget, so the shares are
// checked at start: a budget that cannot hold one sequence of the model's context length is
// refused with every share named, before the worker says it is ready.
#pragma once

#include <cstdint>
#include <string>

#include "model_loader/model_config.hpp"

namespace hotswap::model_loader {

// Bytes of the device, at start-up with the weights allocated.
struct GpuMemoryShares {
  std::uint64_t total = 0;          // the device's memory
  std::uint64_t free = 0;           // free now (other processes' use is not)
  std::uint64_t weights = 0;        // this model's runtime tensors (already allocated)
  std::uint64_t staged_shadow = 0;  // a staged update's copy of them (0 in place)
  std::uint64_t activations = 0;    // a step's temporaries at their largest (an estimate)
  std::uint64_t cuda_graphs = 0;    // the GPU step path's graph pool and workspaces (estimated)
};

struct KvCacheBudget {
  std::uint64_t bytes = 0;
  // One line naming every share, for the start-up log (and the ready line: no "; " in it).
  std::string shares;
};

// The KV cache's bytes: utilization * total less the weights, the shadow, the activations and
// the graphs, and never more than is free once the shadow, activations and graphs are set
// aside. A ValueError naming every share, and what to change, when that is less than
// `one_sequence_bytes` (the blocks of one sequence of `context_length` positions).
KvCacheBudget gpu_kv_cache_budget(const GpuMemoryShares& memory, double gpu_memory_utilization,
                                  std::uint64_t one_sequence_bytes, std::int64_t context_length);

// A step's temporaries at their largest, estimated from the shapes (vLLM profiles a step
// instead): `tokens` rows of the residual stream, the normed copy, the attention's q/k/v and
// output, the MLP's gate_up, its activation and (for a mixture of experts) each token's routed
// copies, in `element_size` bytes, plus float32 logits and probabilities of `sequences` rows.
std::uint64_t estimate_step_activation_bytes(const ModelConfig& config, std::int64_t tokens,
                                             std::int64_t sequences, std::int64_t element_size);

// Bytes shown as GiB with one decimal ("3.9 GiB"), for the shares.
std::string gibibytes(std::uint64_t bytes);

}  // namespace hotswap::model_loader
