// Decode speed on a ServableModel, for the decode benches: greedy steps of a batch after its
// prefill, each sequence on its LoRA adapter where one is given.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "bench/bench_support.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"

namespace hotswap::bench {

inline constexpr std::int64_t kDecodePromptTokens = 16;

// Tokens/s of `steps` greedy decode steps of `batch` sequences after their (untimed) prefill;
// sequence b runs through adapters[b % adapters.size()] (none when `adapters` is empty). No stop
// tokens: every sequence decodes every step.
inline double decode_tokens_per_second(
    const model_loader::ServableModel& model, int batch, int steps,
    const std::vector<std::shared_ptr<const model_loader::LoraAdapter>>& adapters = {}) {
  model_loader::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = steps + 1;
  std::vector<std::int64_t> prompt(kDecodePromptTokens);
  for (std::int64_t i = 0; i < kDecodePromptTokens; ++i)
    prompt[static_cast<std::size_t>(i)] = i * 7 % model.config().vocab_size;
  std::vector<model_loader::Sequence> sequences;
  sequences.reserve(static_cast<std::size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    sequences.emplace_back(prompt, params,
                           adapters.empty() ? nullptr : adapters[b % adapters.size()]);
  }
  std::vector<model_loader::Sequence*> pointers;
  for (auto& s : sequences)
    pointers.push_back(&s);
  model_loader::step(model, pointers);  // the prefill
  const auto start = Clock::now();
  for (int i = 0; i < steps; ++i)
    model_loader::step(model, pointers);
  return batch * steps / since(start);
}

}  // namespace hotswap::bench
