// Generation on a ServableModel: sequences advanced together one forward step at a time (the first
// step of a sequence is its prefill, every later one a one-token decode), so several requests
// share every matmul. The worker's scheduler drives step() itself to add requests, pause and
// switch weights between steps; generate() and score() are the one-shot forms.
#pragma once

#include <ATen/core/Generator.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model_loader/kv_cache.hpp"
#include "model_loader/sampling.hpp"
#include "model_loader/servable_model.hpp"

namespace hotswap::model_loader {

class Sequence {
 public:
  // `lora`: the adapter every step of it runs through (null: the base model).
  Sequence(std::vector<std::int64_t> prompt, SamplingParams params,
           std::shared_ptr<const LoraAdapter> lora = nullptr);

  const std::vector<std::int64_t>& prompt() const { return prompt_; }
  const SamplingParams& params() const { return params_; }
  const std::shared_ptr<const LoraAdapter>& lora() const { return lora_; }
  // Runs its next steps through `lora` instead: a new version of its adapter, committed between
  // two steps as new base weights are (what it cached stays, as it does for the weights).
  void set_lora(std::shared_ptr<const LoraAdapter> lora) { lora_ = std::move(lora); }
  const std::vector<std::int64_t>& output_tokens() const { return output_; }
  const std::vector<double>& output_logprobs() const { return logprobs_; }
  // Per output token, the params().logprobs likeliest alternatives (empty lists when 0).
  const std::vector<std::vector<TokenLogprob>>& output_top_logprobs() const { return top_; }
  // With params().prompt_logprobs, once prefilled: per prompt token after the first, its logprob
  // and the likeliest alternatives at its position.
  const std::vector<SampledToken>& prompt_logprobs() const { return prompt_logprobs_; }
  // "stop" (a stop token or string), "length" (max_tokens), "abort", "error" (see error()), or
  // nothing while running.
  const std::optional<std::string>& finish_reason() const { return finish_reason_; }
  // The stop token that ended the sequence, when one did.
  std::optional<std::int64_t> stop_token() const { return stop_token_; }
  bool finished() const { return finish_reason_.has_value(); }
  // Why this sequence alone failed in a step (its sampling, say), when it did.
  const std::optional<std::string>& error() const { return error_; }
  // True when the last step left it out to free KV cache blocks for the sequences before it
  // (vLLM's recompute preemption): its cache was dropped, and a later step computes it again
  // from the prompt and the tokens produced so far, then samples on. It produced no token.
  bool preempted() const { return preempted_; }
  // How many times it lost a cache it had computed (a sequence waiting its turn again, or one
  // admitted while the cache was full, is left out without counting).
  std::int64_t preemptions() const { return preemptions_; }
  // How many tokens its next step feeds: its last sampled token, or, with no cache, its prompt
  // and whatever it produced before its cache was dropped.
  std::int64_t next_step_tokens() const;
  void abort() { finish_reason_ = "abort"; }
  // Ends the sequence as a stop string does: finish_reason "stop".
  void stop() { finish_reason_ = "stop"; }

 private:
  friend void step(const ServableModel& model, const std::vector<Sequence*>& batch);
  friend void fit_kv_cache(const ServableModel& model, std::vector<Sequence*>& active);
  // The tokens this step feeds: the prompt and whatever was produced before its cache was
  // dropped (a prefill), or the last sampled token (a decode).
  std::vector<std::int64_t> step_tokens() const;
  // Takes this step's result: its prompt logprobs from its rows of the logits (a first prefill
  // that asked for them), then `next`, the token sampled for it.
  void advance(const at::Tensor& logits, std::int64_t first_row, std::int64_t num_tokens,
               bool all_positions, const RowSample& next);
  std::vector<std::int64_t> prompt_;
  SamplingParams params_;
  std::shared_ptr<const LoraAdapter> lora_;
  at::Generator generator_;
  KvCache cache_;
  std::vector<std::int64_t> output_;
  std::vector<double> logprobs_;
  std::vector<std::vector<TokenLogprob>> top_;
  std::vector<SampledToken> prompt_logprobs_;
  std::optional<std::string> finish_reason_;
  std::optional<std::int64_t> stop_token_;
  std::optional<std::string> error_;
  bool preempted_ = false;
  std::int64_t preemptions_ = 0;
};

// One forward step for every unfinished sequence of `batch`, sampling one token each. When the
// model's KV cache lacks the blocks the step needs, the latest sequences of `batch` are
// preempted until the rest fit (Sequence::preempted); a sequence that could not fit alone ends
// with an error naming the budget. Finished sequences give their blocks back.
void step(const ServableModel& model, const std::vector<Sequence*>& batch);

struct GenerationResult {
  std::vector<std::int64_t> token_ids;
  std::vector<double> logprobs;
  std::string finish_reason;
};

// Runs the prompts together to completion; prompt i through adapters[i] where given (null or
// missing: the base model).
std::vector<GenerationResult> generate(
    const ServableModel& model, const std::vector<std::vector<std::int64_t>>& prompts,
    const SamplingParams& params,
    const std::vector<std::shared_ptr<const LoraAdapter>>& adapters = {});

// The logprobs of `continuation` following `prompt`: scoring for RL (log π(a|s)).
std::vector<double> score(const ServableModel& model, const std::vector<std::int64_t>& prompt,
                          const std::vector<std::int64_t>& continuation);

}  // namespace hotswap::model_loader
