#include "model_loader/kv_cache_budget.hpp"

#include <algorithm>
#include <cstdio>
#include <string>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

std::string gibibytes(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

KvCacheBudget gpu_kv_cache_budget(const GpuMemoryShares& memory, double gpu_memory_utilization,
                                  std::uint64_t one_sequence_bytes, std::int64_t context_length) {
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    throw protocol::ValueError("--gpu-memory-utilization " +
                               std::to_string(gpu_memory_utilization) +
                               ": must be above 0 and at most 1");
  }
  const auto signed_bytes = [](std::uint64_t bytes) { return static_cast<double>(bytes); };
  const double ours = gpu_memory_utilization * signed_bytes(memory.total);
  const std::uint64_t set_aside = memory.staged_shadow + memory.activations + memory.cuda_graphs;
  const double by_budget = ours - signed_bytes(memory.weights) - signed_bytes(set_aside);
  const double by_free = signed_bytes(memory.free) - signed_bytes(set_aside);
  const double kv = std::max(0.0, std::min(by_budget, by_free));
  KvCacheBudget budget;
  budget.bytes = static_cast<std::uint64_t>(kv);
  char fraction[16];
  std::snprintf(fraction, sizeof fraction, "%.2f", gpu_memory_utilization);
  budget.shares = "KV cache " + gibibytes(budget.bytes) + " of --gpu-memory-utilization " +
                  fraction + " x " + gibibytes(memory.total) + " (weights " +
                  gibibytes(memory.weights) + ", staged shadow " + gibibytes(memory.staged_shadow) +
                  ", activations " + gibibytes(memory.activations) + ", CUDA graphs " +
                  gibibytes(memory.cuda_graphs) + ", " + gibibytes(memory.free) +
                  " free after the weights)";
  if (budget.bytes < one_sequence_bytes) {
    throw protocol::ValueError(
        budget.shares + ": one sequence of the model's " + std::to_string(context_length) +
        " positions needs " + gibibytes(one_sequence_bytes) +
        " of KV cache; raise --gpu-memory-utilization, free the GPU of other processes, use "
        "--update-mode inplace (no shadow), or set --kv-cache-memory-bytes");
  }
  return budget;
}

std::uint64_t estimate_step_activation_bytes(const ModelConfig& config, std::int64_t tokens,
                                             std::int64_t sequences, std::int64_t element_size) {
  const std::int64_t attention = config.q_size() + 2 * config.kv_size() + config.q_size();
  const std::int64_t mlp_width = config.num_experts_per_tok > 0
                                     ? config.num_experts_per_tok * config.moe_intermediate_size
                                     : config.intermediate_size;
  const std::int64_t per_token = 2 * config.hidden_size + attention + 3 * mlp_width;
  const auto rows = static_cast<std::uint64_t>(std::max<std::int64_t>(tokens, 0));
  const auto logits = static_cast<std::uint64_t>(std::max<std::int64_t>(sequences, 0)) *
                      static_cast<std::uint64_t>(config.vocab_size) * 4 * 2;
  return rows * static_cast<std::uint64_t>(per_token * element_size) + logits;
}

}  // namespace hotswap::model_loader
