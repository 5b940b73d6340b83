#include "model_loader/blocks/step_inputs.hpp"

#include <ATen/TensorIndexing.h>
#include <ATen/ops/tensor.h>

namespace hotswap::model_loader {
namespace {

at::Tensor positions_of(const std::vector<ForwardSlice>& slices, std::int64_t n,
                        c10::Device device) {
  std::vector<std::int64_t> list;
  list.reserve(static_cast<std::size_t>(n));
  for (const auto& s : slices) {
    for (std::int64_t i = 0; i < s.num_tokens; ++i)
      list.push_back(s.cache->length + i);
  }
  return at::tensor(list, at::TensorOptions().dtype(at::kLong)).to(device);
}

at::Tensor last_rows_of(const std::vector<ForwardSlice>& slices, c10::Device device) {
  std::vector<std::int64_t> last;
  std::int64_t end = 0;
  for (const auto& s : slices) {
    end += s.num_tokens;
    last.push_back(end - 1);
  }
  return at::tensor(last, at::TensorOptions().dtype(at::kLong)).to(device);
}

// Blocks for the step's new positions, taken before any weight is read, and the plan every
// layer's attention reads them by.
PagedAttentionPlan plan_of(const std::vector<ForwardSlice>& slices, const ModelConfig& config,
                           KvBlockPool& pool, c10::Device device,
                           const PagedAttentionLimits& limits) {
  std::vector<PagedSlice> paged;
  paged.reserve(slices.size());
  for (const auto& s : slices) {
    pool.reserve(*s.cache, s.num_tokens);
    paged.push_back({s.cache, s.cache->length, s.num_tokens});
  }
  return PagedAttentionPlan::make(paged, pool.block_size(), config.sliding_window, device, limits);
}

}  // namespace

StepInputs::StepInputs(const at::Tensor& tokens, const std::vector<ForwardSlice>& slices,
                       bool all_positions, const ModelConfig& config, KvBlockPool& pool,
                       c10::Device device, const PagedAttentionLimits& limits,
                       const RotaryEmbedding* rope_embedding)
    : num_tokens(tokens.size(0)),
      ids(checked_step_tokens(tokens, slices, config.vocab_size).to(device)),
      positions(positions_of(slices, num_tokens, device)),
      last_rows(all_positions ? at::Tensor() : last_rows_of(slices, device)),
      plan(plan_of(slices, config, pool, device, limits)),
      // Per step, not per layer: the rotary angles.
      rope(rope_embedding != nullptr ? rope_embedding->tables(positions)
                                     : RotaryEmbedding::Tables{}),
      lora(slices, device) {}

void StepInputs::advance(std::vector<ForwardSlice>& slices) {
  for (auto& s : slices)
    s.cache->length += s.num_tokens;
}

at::Tensor StepInputs::returned_rows(const at::Tensor& h) const {
  return last_rows.defined() ? h.index({last_rows}) : h;
}

}  // namespace hotswap::model_loader
