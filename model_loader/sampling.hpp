// Sampling of the next token from a row of logits, with vLLM's parameters. The logprob reported
// for a token is the log-softmax of the raw logits (before temperature) at its position.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "protocol/method_params.hpp"

namespace hotswap::model_loader {

// A request's sampling fields (protocol::SamplingFields: temperature, top_p, top_k, min_p,
// seed), and what generation adds to them.
struct SamplingParams : protocol::SamplingFields {
  std::int64_t max_tokens = 16;
  std::vector<std::int64_t> stop_token_ids;
  // How many likeliest alternatives to report beside each sampled token's logprob (vLLM's
  // `logprobs`); 0: the sampled token's only.
  std::int64_t logprobs = 0;
  // Also the logprobs of the prompt's tokens, each with `logprobs` alternatives (vLLM's echo with
  // logprobs); the first token has none.
  bool prompt_logprobs = false;

  // ValueError naming the field on a value out of range (non-finite numbers included): the
  // sampling fields' one validator, then max_tokens and logprobs.
  void validate() const;

  // vLLM's rules for values that pass validation but would sample badly in float32: a
  // temperature in (0, kMinTemperature) is raised to kMinTemperature, and a temperature under
  // kSamplingEpsilon (that is, 0) means greedy, which turns top_p, top_k and min_p off.
  // Idempotent; Sequence applies it, so no caller can skip it.
  void apply_vllm_rules();
};

using protocol::kMinTemperature;
using protocol::kSamplingEpsilon;

struct TokenLogprob {
  std::int64_t token = 0;
  double logprob = 0.0;
};

struct SampledToken {
  std::int64_t token = 0;
  double logprob = 0.0;
  std::vector<TokenLogprob> top;  // the params.logprobs likeliest, likeliest first
};

// The `k` likeliest tokens of a row of log-probabilities, likeliest first.
std::vector<TokenLogprob> top_logprobs(const at::Tensor& logprobs, std::int64_t k);

// `generator` is a CPU generator (only used when temperature > 0). Whatever the parameters, at
// least one token stays eligible; a row that still has no valid distribution (NaN logits)
// is a RuntimeError naming the cause, for this row's sequence alone.
SampledToken sample_token(const at::Tensor& logits, const SamplingParams& params,
                          at::Generator& generator);

// A CPU generator seeded with `seed`, or from the OS when there is none.
at::Generator make_cpu_generator(std::optional<std::uint64_t> seed);

}  // namespace hotswap::model_loader
