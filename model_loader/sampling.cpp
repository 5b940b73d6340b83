#include "model_loader/sampling.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/cumsum.h>
#include <ATen/ops/isfinite.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/max.h>
#include <ATen/ops/searchsorted.h>
#include <ATen/ops/softmax.h>
#include <ATen/ops/sort.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>
#include <ATen/ops/zeros_like.h>

#include <algorithm>
#include <cmath>
#include <mutex>
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

std::vector<RowSample> sample_tokens(const at::Tensor& logits,
                                     const std::vector<const SamplingParams*>& params,
                                     const std::vector<at::Generator*>& generators) {
  const auto cpu = c10::Device(c10::kCPU);
  at::Tensor rows = logits.to(at::kFloat).to(cpu).contiguous();  // one copy off the device
  const std::int64_t count = rows.size(0), vocab = rows.size(1);
  at::Tensor logprobs = at::log_softmax(rows, -1);
  at::Tensor tokens = at::argmax(rows, -1);  // the greedy rows' answer; sampled rows overwrite it
  std::vector<RowSample> out(static_cast<std::size_t>(count));

  std::vector<std::int64_t> sampled;
  for (std::int64_t r = 0; r < count; ++r) {
    if (params[static_cast<std::size_t>(r)]->temperature != 0.0) sampled.push_back(r);
  }
  if (!sampled.empty()) {
    const auto n = static_cast<std::int64_t>(sampled.size());
    std::vector<double> temperature, top_p, min_p;
    std::vector<std::int64_t> top_k;
    bool any_top_k = false, any_top_p = false, any_min_p = false;
    for (auto r : sampled) {
      const SamplingParams& p = *params[static_cast<std::size_t>(r)];
      temperature.push_back(p.temperature);
      const bool k_on = p.top_k > 0 && p.top_k < vocab;
      top_k.push_back(k_on ? p.top_k : vocab);  // the vocabulary's size: nothing filtered
      top_p.push_back(p.top_p);
      min_p.push_back(p.min_p);
      any_top_k = any_top_k || k_on;
      any_top_p = any_top_p || p.top_p < 1.0;
      any_min_p = any_min_p || p.min_p > 0.0;
    }
    auto column = [&](const std::vector<double>& v) {
      return at::tensor(v, at::TensorOptions().dtype(at::kDouble)).to(at::kFloat).unsqueeze(1);
    };
    at::Tensor index = at::tensor(sampled, at::TensorOptions().dtype(at::kLong));
    at::Tensor probs = at::softmax(rows.index_select(0, index) / column(temperature), -1);
    if (any_top_k) {
      // Everything below each row's k-th largest probability goes (ties at the k-th stay).
      at::Tensor k = at::tensor(top_k, at::TensorOptions().dtype(at::kLong)).unsqueeze(1) - 1;
      at::Tensor kth = std::get<0>(at::sort(probs, -1, /*descending=*/true)).gather(1, k);
      probs = probs.masked_fill(probs < kth, 0.0);
    }
    if (any_min_p) {
      probs = probs.masked_fill(
          probs < std::get<0>(probs.max(-1, /*keepdim=*/true)) * column(min_p), 0.0);
    }
    if (any_top_p) {
      auto [sorted, order] = at::sort(probs, /*dim=*/-1, /*descending=*/true);
      // Keep a token while the mass before it is under top_p (rows without top_p keep all). The
      // likeliest always stays, by index rather than by comparison: a top_p of 1e-300 is 0 once
      // compared in float32.
      at::Tensor before = at::cumsum(sorted, -1) - sorted;
      at::Tensor limited = (column(top_p) < 1.0);
      at::Tensor drop = (before >= column(top_p)).logical_and(limited);
      drop.select(1, 0).fill_(false);
      sorted = sorted.masked_fill(drop, 0.0);
      probs = at::zeros_like(probs).scatter_(1, order, sorted);
    }
    // Every row at once, by inverse transform: one uniform draw per row from the row's own
    // generator (its request's seed), then one search of each row's cumulative probabilities
    // for where the draw falls. (A multinomial call per row, each with its generator, took 2 of
    // a 16 ms decode step at 64 sequences.) A token of probability 0 is never picked: the
    // search returns the first position whose cumulative sum exceeds the target, and the target
    // stays below the row's total.
    at::Tensor cdf = at::cumsum(probs, -1);
    at::Tensor totals = cdf.select(1, vocab - 1).contiguous();
    at::Tensor valid = at::isfinite(probs).all(-1).logical_and(totals > 0.0);
    const bool* ok = valid.data_ptr<bool>();
    const float* total = totals.data_ptr<float>();
    std::vector<float> targets(static_cast<std::size_t>(n), 0.0f);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(sampled[static_cast<std::size_t>(i)]);
      if (!ok[i]) continue;
      auto* generator = at::check_generator<at::CPUGeneratorImpl>(*generators[r]);
      double u = 0;
      {
        std::lock_guard lock(generator->mutex_);
        u = static_cast<double>(generator->random64() >> 11) * 0x1.0p-53;  // [0, 1)
      }
      targets[static_cast<std::size_t>(i)] =
          std::min(static_cast<float>(u * total[i]), std::nextafter(total[i], 0.0f));
    }
    at::Tensor picked = at::searchsorted(cdf, at::tensor(targets).unsqueeze(1), /*out_int32=*/false,
                                         /*right=*/true)
                            .clamp_max(vocab - 1)
                            .contiguous();
    const auto* pick = picked.data_ptr<std::int64_t>();
    auto* token = tokens.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      const auto r = static_cast<std::size_t>(sampled[static_cast<std::size_t>(i)]);
      if (!ok[i]) {
        out[r].error =
            "the model's logits for this sequence give no valid distribution to sample from "
            "(NaN or infinite values)";
        continue;
      }
      token[r] = pick[i];
    }
  }

  at::Tensor chosen = logprobs.gather(1, tokens.unsqueeze(1)).squeeze(1);
  std::int64_t most = 0;
  for (const auto* p : params)
    most = std::max(most, p->logprobs);
  most = std::min(most, vocab);
  at::Tensor top_values, top_indices;
  if (most > 0) {
    auto [v, i] = at::topk(logprobs, most);
    top_values = v.contiguous();
    top_indices = i.contiguous();
  }
  const auto* token = tokens.data_ptr<std::int64_t>();
  const auto* logprob = chosen.data_ptr<float>();
  const float* top_value = most > 0 ? top_values.data_ptr<float>() : nullptr;
  const std::int64_t* top_token = most > 0 ? top_indices.data_ptr<std::int64_t>() : nullptr;
  for (std::int64_t r = 0; r < count; ++r) {
    auto& row = out[static_cast<std::size_t>(r)];
    if (row.error) continue;
    row.token.token = token[r];
    row.token.logprob = static_cast<double>(logprob[r]);
    const std::int64_t k = std::min(params[static_cast<std::size_t>(r)]->logprobs, most);
    for (std::int64_t j = 0; j < k; ++j)
      row.token.top.push_back(
          {top_token[r * most + j], static_cast<double>(top_value[r * most + j])});
  }
  return out;
}

}  // namespace hotswap::model_loader
