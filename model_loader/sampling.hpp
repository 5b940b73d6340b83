// Sampling of the next token from a row of logits, with vLLM's parameters. The logprob reported
// for a token is the log-softmax of the raw logits (before temperature) at its position.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <string>
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

// One row's draw in a batch: its token, or why its row had no valid distribution.
struct RowSample {
  SampledToken token;
  std::optional<std::string> error;
};

// The next token of every row of `logits` [rows, vocab] (any device), row r with `params[r]`
// and, when its temperature is > 0, the CPU generator `generators[r]`. The filters run on the
// whole batch at once (one copy to the host, one softmax, a sort for top-k and one for top-p
// where a row asks for them); only the draw is per row, from each row's own generator, so that a
// seeded request gets the same tokens alone or in any batch. Whatever the parameters, at least one
// token stays eligible; a row that still has no valid distribution (NaN logits) gets an error
// naming the cause, for its sequence alone.
std::vector<RowSample> sample_tokens(const at::Tensor& logits,
                                     const std::vector<const SamplingParams*>& params,
                                     const std::vector<at::Generator*>& generators);

// A CPU generator seeded with `seed`, or from the OS when there is none.
at::Generator make_cpu_generator(std::optional<std::uint64_t> seed);

}  // namespace hotswap::model_loader
