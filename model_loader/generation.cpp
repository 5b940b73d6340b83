#include "model_loader/generation.hpp"

#include <ATen/ops/log_softmax.h>
#include <ATen/ops/tensor.h>

#include <algorithm>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

Sequence::Sequence(std::vector<std::int64_t> prompt, SamplingParams params)
    : prompt_(std::move(prompt)),
      params_(std::move(params)),
      generator_(make_cpu_generator(params_.seed)) {
  if (prompt_.empty()) throw protocol::ValueError("a prompt needs at least one token");
  params_.validate();
}

void step(const ServableModel& model, const std::vector<Sequence*>& batch) {
  std::vector<Sequence*> active;
  std::vector<std::int64_t> tokens;
  std::vector<ForwardSlice> slices;
  for (Sequence* s : batch) {
    if (s->finished()) continue;
    active.push_back(s);
    if (s->cache_.length == 0) {  // prefill: the whole prompt
      tokens.insert(tokens.end(), s->prompt_.begin(), s->prompt_.end());
      slices.push_back({&s->cache_, static_cast<std::int64_t>(s->prompt_.size())});
    } else {  // decode: the last sampled token
      tokens.push_back(s->output_.back());
      slices.push_back({&s->cache_, 1});
    }
  }
  if (active.empty()) return;
  at::Tensor logits =
      model.forward(at::tensor(tokens, at::TensorOptions().dtype(at::kLong)), slices);
  for (std::size_t i = 0; i < active.size(); ++i) {
    Sequence& s = *active[i];
    SampledToken next = sample_token(logits[static_cast<std::int64_t>(i)], s.params_, s.generator_);
    s.output_.push_back(next.token);
    s.logprobs_.push_back(next.logprob);
    const auto& stops = s.params_.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), next.token) != stops.end()) {
      s.finish_reason_ = "stop";
    } else if (static_cast<std::int64_t>(s.output_.size()) >= s.params_.max_tokens) {
      s.finish_reason_ = "length";
    }
  }
}

std::vector<GenerationResult> generate(const ServableModel& model,
                                       const std::vector<std::vector<std::int64_t>>& prompts,
                                       const SamplingParams& params) {
  std::vector<Sequence> sequences;
  sequences.reserve(prompts.size());
  for (const auto& p : prompts)
    sequences.emplace_back(p, params);
  std::vector<Sequence*> batch;
  for (auto& s : sequences)
    batch.push_back(&s);
  while (std::any_of(batch.begin(), batch.end(), [](Sequence* s) { return !s->finished(); })) {
    step(model, batch);
  }
  std::vector<GenerationResult> results;
  for (const auto& s : sequences) {
    results.push_back({s.output_tokens(), s.output_logprobs(), *s.finish_reason()});
  }
  return results;
}

std::vector<double> score(const ServableModel& model, const std::vector<std::int64_t>& prompt,
                          const std::vector<std::int64_t>& continuation) {
  if (prompt.empty()) throw protocol::ValueError("scoring needs at least one prompt token");
  std::vector<std::int64_t> tokens = prompt;
  tokens.insert(tokens.end(), continuation.begin(), continuation.end());
  KvCache cache;
  std::vector<ForwardSlice> slices{{&cache, static_cast<std::int64_t>(tokens.size())}};
  at::Tensor logits = model.forward(at::tensor(tokens, at::TensorOptions().dtype(at::kLong)),
                                    slices, /*all_positions=*/true);
  at::Tensor logprobs = at::log_softmax(logits, -1);
  std::vector<double> out;
  for (std::size_t i = 0; i < continuation.size(); ++i) {
    auto position = static_cast<std::int64_t>(prompt.size() + i - 1);
    out.push_back(logprobs[position][continuation[i]].item<double>());
  }
  return out;
}

}  // namespace hotswap::model_loader
