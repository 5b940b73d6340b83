#include "model_loader/sampling.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/max.h>
#include <ATen/ops/multinomial.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <utility>

#include "protocol/errors.hpp"

namespace hotswap::model_loader {

void SamplingParams::validate() const {
  SamplingFields::validate();
  if (max_tokens < 1) {
    throw protocol::ValueError("max_tokens must be at least 1, got " + std::to_string(max_tokens) +
                               ".");
  }
  if (logprobs < 0) {
    throw protocol::ValueError("`logprobs` must be a positive value.");
  }
}

void SamplingParams::apply_vllm_rules() {
  if (temperature > 0.0 && temperature < kMinTemperature) temperature = kMinTemperature;
  if (temperature < kSamplingEpsilon) {
    temperature = 0.0;
    top_p = 1.0;
    top_k = 0;
    min_p = 0.0;
  }
}

std::vector<TokenLogprob> top_logprobs(const at::Tensor& logprobs, std::int64_t k) {
  std::vector<TokenLogprob> out;
  k = std::min<std::int64_t>(k, logprobs.size(-1));
  if (k <= 0) return out;
  auto [values, indices] = at::topk(logprobs, k);
  auto v = values.to(at::kFloat).to(at::kCPU).contiguous();  // read through a host pointer
  auto i = indices.to(at::kCPU).contiguous();
  const float* vp = v.data_ptr<float>();
  const std::int64_t* ip = i.data_ptr<std::int64_t>();
  for (std::int64_t j = 0; j < k; ++j)
    out.push_back({ip[j], static_cast<double>(vp[j])});
  return out;
}

at::Generator make_cpu_generator(std::optional<std::uint64_t> seed) {
  std::uint64_t s =
      seed ? *seed
           : (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  return at::make_generator<at::CPUGeneratorImpl>(s);
}

SampledToken sample_token(const at::Tensor& logits, const SamplingParams& params,
                          at::Generator& generator) {
  at::Tensor row = logits.to(at::kFloat).to(c10::Device(c10::kCPU)).reshape({-1});
  at::Tensor logprobs = at::log_softmax(row, -1);
  std::int64_t token = 0;
  if (params.temperature == 0.0) {
    token = at::argmax(row).item<std::int64_t>();
  } else {
    at::Tensor probs = at::softmax(row / params.temperature, -1);
    const std::int64_t vocab = probs.size(0);
    if (params.top_k > 0 && params.top_k < vocab) {
      // Everything below the k-th largest probability goes (ties at the k-th stay).
      at::Tensor kth = std::get<0>(at::topk(probs, params.top_k))[params.top_k - 1];
      probs = probs.masked_fill(probs < kth, 0.0);
    }
    if (params.min_p > 0.0) {
      probs = probs.masked_fill(probs < probs.max() * params.min_p, 0.0);
    }
    if (params.top_p < 1.0) {
      auto [sorted, order] = at::sort(probs, /*dim=*/-1, /*descending=*/true);
      // Keep a token while the mass before it is under top_p. The likeliest always stays, by
      // index rather than by comparison: a top_p of 1e-300 is 0 once compared in float32.
      at::Tensor before = at::cumsum(sorted, -1) - sorted;
      at::Tensor drop = before >= params.top_p;
      drop.select(0, 0).fill_(false);
      sorted = sorted.masked_fill(drop, 0.0);
      probs = at::zeros_like(probs).scatter_(0, order, sorted);
    }
    // multinomial's own message ("probability tensor contains either inf, nan or element < 0")
    // does not say why: name the row's fault instead.
    if (!at::isfinite(probs).all().item<bool>() || !(probs.sum().item<double>() > 0.0)) {
      throw protocol::RuntimeError(
          "the model's logits for this sequence give no valid distribution to sample from "
          "(NaN or infinite values)");
    }
    token = at::multinomial(probs, 1, /*replacement=*/false, generator).item<std::int64_t>();
  }
  return {token, logprobs[token].item<double>(), top_logprobs(logprobs, params.logprobs)};
}

}  // namespace hotswap::model_loader
