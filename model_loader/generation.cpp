#include "model_loader/generation.hpp"

#include <ATen/ops/index_select.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <string>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

Sequence::Sequence(std::vector<std::int64_t> prompt, SamplingParams params,
                   std::shared_ptr<const LoraAdapter> lora)
    : prompt_(std::move(prompt)),
      params_(std::move(params)),
      lora_(std::move(lora)),
      generator_(make_cpu_generator(params_.seed)) {
  if (prompt_.empty()) throw protocol::ValueError("a prompt needs at least one token");
  params_.validate();
  params_.apply_vllm_rules();
}

std::vector<std::int64_t> Sequence::step_tokens() const {
  if (cache_.length > 0) return {output_.back()};
  std::vector<std::int64_t> tokens = prompt_;
  tokens.insert(tokens.end(), output_.begin(), output_.end());
  return tokens;
}

std::int64_t Sequence::next_step_tokens() const {
  if (cache_.length > 0) return 1;
  return static_cast<std::int64_t>(prompt_.size() + output_.size());
}

// Fits this step's sequences into the model's KV cache. A sequence that the whole budget
// cannot hold ends with an error first, so that nothing is preempted for it; then sequences are
// preempted from the back of `active` (the latest admitted, as vLLM does) until the blocks the
// rest need this step are free; the preempted give theirs back at once.
void fit_kv_cache(const ServableModel& model, std::vector<Sequence*>& active) {
  const KvBlockPool* pool = model.kv_pool();
  if (pool == nullptr) return;
  auto positions = [](const Sequence* s) { return s->cache_.length + s->next_step_tokens(); };
  std::erase_if(active, [&](Sequence* s) {
    const std::int64_t blocks = pool->blocks_for(positions(s));
    if (blocks <= pool->max_blocks()) return false;
    s->error_ = "the KV cache cannot hold this sequence: its " + std::to_string(positions(s)) +
                " positions need " + std::to_string(blocks) + " blocks of " +
                std::to_string(pool->block_size()) + ", and the budget allows " +
                std::to_string(pool->max_blocks()) + " (--kv-cache-memory-bytes, --block-size)";
    s->finish_reason_ = "error";
    s->cache_.clear();
    return true;
  });
  auto needs = [&](const Sequence* s) {
    return std::max<std::int64_t>(
        0, pool->blocks_for(positions(s)) - static_cast<std::int64_t>(s->cache_.blocks().size()));
  };
  std::int64_t free = pool->free_blocks(), needed = 0;
  for (const Sequence* s : active)
    needed += needs(s);
  while (needed > free && active.size() > 1) {
    Sequence* last = active.back();
    needed -= needs(last);
    const auto held = static_cast<std::int64_t>(last->cache_.blocks().size());
    free += held;
    if (held > 0 || last->cache_.length > 0) ++last->preemptions_;
    last->cache_.clear();
    last->preempted_ = true;
    active.pop_back();
  }
  // Alone, a sequence fits the budget (checked above); it can still lack blocks that caches
  // outside this step hold (a scoring call's): it waits, as the preempted do, rather than
  // failing a step that has begun.
  if (needed > free) {
    active.back()->preempted_ = true;
    active.pop_back();
  }
}

void step(const ServableModel& model, const std::vector<Sequence*>& batch) {
  std::vector<Sequence*> active;
  for (Sequence* s : batch) {
    s->preempted_ = false;
    if (s->finished()) {
      s->cache_.clear();  // an aborted or stopped sequence's blocks serve the others
      continue;
    }
    active.push_back(s);
  }
  fit_kv_cache(model, active);
  std::vector<std::int64_t> tokens;
  std::vector<ForwardSlice> slices;
  bool all_positions = false;  // a first prefill wants its prompt's logprobs
  for (Sequence* s : active) {
    const std::vector<std::int64_t> fed = s->step_tokens();  // next_step_tokens() of them
    if (s->cache_.length == 0 && s->output_.empty()) {
      all_positions = all_positions || s->params_.prompt_logprobs;
    }
    tokens.insert(tokens.end(), fed.begin(), fed.end());
    slices.push_back({&s->cache_, static_cast<std::int64_t>(fed.size()), s->lora_.get()});
  }
  if (active.empty()) return;
  // The rows each slice spans in the logits: one per slice, or one per token.
  std::vector<std::int64_t> first_row, last_row;
  std::int64_t rows = 0;
  for (const auto& slice : slices) {
    first_row.push_back(rows);
    rows += all_positions ? slice.num_tokens : 1;
    last_row.push_back(rows - 1);
  }
  at::Tensor logits = model.forward(at::tensor(tokens, at::TensorOptions().dtype(at::kLong)),
                                    slices, all_positions);
  // Every sequence's next token in one batched sampling call, over each one's last row.
  std::vector<const SamplingParams*> params;
  std::vector<at::Generator*> generators;
  for (Sequence* s : active) {
    params.push_back(&s->params_);
    generators.push_back(&s->generator_);
  }
  const at::Tensor last =
      all_positions
          ? logits.index_select(
                0, at::tensor(last_row, at::TensorOptions().dtype(at::kLong)).to(logits.device()))
          : logits;
  const std::vector<RowSample> next = sample_tokens(last, params, generators);
  for (std::size_t i = 0; i < active.size(); ++i) {
    Sequence& s = *active[i];
    // What goes wrong past the shared forward is this sequence's alone: it ends with its own
    // error and the rest of the batch goes on.
    try {
      s.advance(logits, first_row[i], slices[i].num_tokens, all_positions, next[i]);
    } catch (const std::exception& e) {
      s.error_ = e.what();
      s.finish_reason_ = "error";
      s.cache_.clear();
    }
  }
}

void Sequence::advance(const at::Tensor& logits, std::int64_t first_row, std::int64_t num_tokens,
                       bool all_positions, const RowSample& next) {
  if (all_positions && params_.prompt_logprobs && output_.empty()) {
    // Position p predicts prompt token p + 1.
    at::Tensor lp = at::log_softmax(logits.narrow(0, first_row, num_tokens - 1), -1)
                        .to(at::kFloat)
                        .to(at::kCPU)  // one copy off the device, not one per token
                        .contiguous();
    for (std::size_t p = 1; p < prompt_.size(); ++p) {
      at::Tensor row = lp[static_cast<std::int64_t>(p - 1)];
      prompt_logprobs_.push_back(
          {prompt_[p], row[prompt_[p]].item<double>(), top_logprobs(row, params_.logprobs)});
    }
  }
  if (next.error) throw protocol::RuntimeError(*next.error);
  output_.push_back(next.token.token);
  logprobs_.push_back(next.token.logprob);
  top_.push_back(next.token.top);
  const auto& stops = params_.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), next.token.token) != stops.end()) {
    finish_reason_ = "stop";
    stop_token_ = next.token.token;
  } else if (static_cast<std::int64_t>(output_.size()) >= params_.max_tokens) {
    finish_reason_ = "length";
  }
  if (finished()) cache_.clear();  // its blocks serve the others from the next step on
}

std::vector<GenerationResult> generate(
    const ServableModel& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const SamplingParams& params, const std::vector<std::shared_ptr<const LoraAdapter>>& adapters) {
  std::vector<Sequence> sequences;
  sequences.reserve(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i)
    sequences.emplace_back(prompts[i], params, i < adapters.size() ? adapters[i] : nullptr);
  std::vector<Sequence*> batch;
  for (auto& s : sequences)
    batch.push_back(&s);
  while (std::any_of(batch.begin(), batch.end(), [](Sequence* s) { return !s->finished(); })) {
    step(model, batch);
  }
  std::vector<GenerationResult> results;
  for (const auto& s : sequences) {
    if (s.error()) throw protocol::RuntimeError("generation failed: " + *s.error());
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
