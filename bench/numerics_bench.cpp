// bfloat16 numerics against transformers': for every golden fixture (tests/golden/model_loader,
// one per architecture and configuration), the log-probability of each next prompt token
// of four 48-token prompts (teacher forcing, as an RL trainer scores a rollout) computed by hotswap
// in bfloat16 and by transformers in bfloat16, each held against the same reference: transformers
// computing the same bfloat16-rounded weights in float32 (bench/numerics_peer.py). Prints each
// engine's mean |logprob error| and their ratio (hotswap / transformers; target ≤ 1 on every
// architecture). Needs HOTSWAP_PEER_PYTHON (a python with torch and transformers); without it, says
// it skipped.
//
// Usage: hotswap_numerics_bench [--json] [--detail] [--fixture NAME]... [--prompts N]
//   --detail: every position's errors; --fixture: only those fixtures; --prompts: how many
//   prompts per fixture (4; more for a steadier mean where a few routing flips dominate it)
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "model_loader/servable_model.hpp"

using namespace hotswap;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kPromptTokens = 48;

std::vector<double> hotswap_logprobs(const fs::path& dir, const std::vector<std::int64_t>& ids) {
  model_loader::ModelOptions options;
  options.dtype = protocol::DType::kBFloat16;
  auto model = model_loader::load_model(dir, options);
  model_loader::KvCache cache;
  std::vector<model_loader::ForwardSlice> slices{{&cache, static_cast<std::int64_t>(ids.size())}};
  at::Tensor tokens = at::tensor(ids, at::TensorOptions().dtype(at::kLong));
  at::Tensor logprobs = at::log_softmax(model->forward(tokens, slices, true), -1);
  std::vector<double> out;
  for (std::size_t t = 0; t + 1 < ids.size(); ++t)
    out.push_back(logprobs[static_cast<std::int64_t>(t)][ids[t + 1]].item<double>());
  return out;
}

std::vector<double> abs_errors(const std::vector<double>& values,
                               const std::vector<double>& reference) {
  std::vector<double> errors;
  for (std::size_t i = 0; i < values.size(); ++i)
    errors.push_back(std::abs(values[i] - reference[i]));
  return errors;
}

double mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values)
    sum += v;
  return values.empty() ? 0 : sum / static_cast<double>(values.size());
}

// Positions off by more than this are a different choice, not rounding: a mixture of experts
// whose router, in bfloat16, picked another expert than float32 did (a near-tie in the router's
// logits, which either engine's rounding may break either way).
constexpr double kFlipNats = 0.1;

std::int64_t flips(const std::vector<double>& errors) {
  return std::count_if(errors.begin(), errors.end(), [](double e) { return e > kFlipNats; });
}

}  // namespace

int main(int argc, char** argv) {
  bool detail = false;
  std::int64_t prompts = 4;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      bench::json_only() = true;
    } else if (arg == "--detail") {
      detail = true;
    } else if (arg == "--fixture" && i + 1 < argc) {
      only.push_back(argv[++i]);
    } else if (arg == "--prompts" && i + 1 < argc) {
      prompts = std::max(1, std::stoi(argv[++i]));
    } else {
      throw std::invalid_argument("unknown argument '" + arg +
                                  "' (usage: hotswap_numerics_bench [--json] [--detail] "
                                  "[--fixture NAME]... [--prompts N])");
    }
  }
  if (bench::peer_python() == nullptr) {
    bench::say_peer_skipped();
    return 0;
  }
  std::vector<fs::path> fixtures;
  for (const auto& entry : fs::directory_iterator(fs::path(HOTSWAP_GOLDEN_DIR) / "model_loader")) {
    const std::string name = entry.path().filename().string();
    if (only.empty() || std::find(only.begin(), only.end(), name) != only.end()) {
      fixtures.push_back(entry.path());
    }
  }
  for (const auto& name : only) {
    if (!fs::is_directory(fs::path(HOTSWAP_GOLDEN_DIR) / "model_loader" / name)) {
      throw std::invalid_argument("no golden fixture '" + name + "' under " +
                                  (fs::path(HOTSWAP_GOLDEN_DIR) / "model_loader").string());
    }
  }
  std::sort(fixtures.begin(), fixtures.end());
  for (const auto& dir : fixtures) {
    // Longer prompts than the fixture's own, for a steadier mean: `prompts` prompts of up to
    // kPromptTokens ids spread over the vocabulary, within the fixture's context.
    auto config = nlohmann::json::parse(std::ifstream(dir / "config.json"));
    const std::int64_t vocab = config["vocab_size"].get<std::int64_t>();
    const std::int64_t length = std::min<std::int64_t>(
        kPromptTokens, config["max_position_embeddings"].get<std::int64_t>());
    const std::string name = dir.filename().string();
    std::vector<double> hotswap, transformers, reference;
    bool failed = false;
    for (std::int64_t p = 0; p < prompts && !failed; ++p) {
      std::vector<std::int64_t> prompt;
      for (std::int64_t i = 0; i < length; ++i)
        prompt.push_back((i * (37 + 2 * p) + 11 * p + 3) % vocab);
      std::vector<std::string> arguments{dir.string()};
      for (auto id : prompt)
        arguments.push_back(std::to_string(id));
      const auto peer = bench::run_peer(HOTSWAP_BENCH_DIR, "numerics_peer.py", arguments);
      if (!peer) {
        failed = true;
        break;
      }
      for (double v : hotswap_logprobs(dir, prompt))
        hotswap.push_back(v);
      for (double v : peer->at("bf16").get<std::vector<double>>())
        transformers.push_back(v);
      for (double v : peer->at("reference").get<std::vector<double>>())
        reference.push_back(v);
    }
    if (failed) {
      std::printf("%s: the peer failed to run (see bench/numerics_peer.py)\n", name.c_str());
      continue;
    }
    const auto our_errors = abs_errors(hotswap, reference);
    const auto their_errors = abs_errors(transformers, reference);
    const double ours = mean(our_errors), theirs = mean(their_errors);
    const double our_median = bench::spread_of(our_errors).median;
    const double their_median = bench::spread_of(their_errors).median;
    if (detail) {
      for (std::size_t t = 0; t < reference.size(); ++t) {
        std::printf("  %s position %zu: reference %.5f, hotswap %+.5f, transformers %+.5f\n",
                    dir.filename().c_str(), t, reference[t], hotswap[t] - reference[t],
                    transformers[t] - reference[t]);
      }
    }
    // A few routing flips, each cascading through the rest of its prompt, move a mixture of
    // experts' mean by tens of percent either way: count the prompts on which hotswap's mean
    // error is no worse than transformers' as well (a sign test: about half for a tie).
    std::int64_t no_worse = 0;
    const std::size_t per_prompt = our_errors.size() / static_cast<std::size_t>(prompts);
    for (std::int64_t p = 0; p < prompts; ++p) {
      const auto from = static_cast<std::size_t>(p) * per_prompt;
      auto part = [&](const std::vector<double>& e) {
        return mean(std::vector<double>(e.begin() + from, e.begin() + from + per_prompt));
      };
      if (part(our_errors) <= part(their_errors)) ++no_worse;
    }
    const double ratio = theirs > 0 ? ours / theirs : 0.0;
    const double median_ratio = their_median > 0 ? our_median / their_median : 0.0;
    if (!bench::json_only()) {
      std::printf(
          "%-22s mean |logprob error| hotswap %.4f, transformers %.4f: %.2fx; median %.2fx; "
          "positions off by > %.1f nats: %lld and %lld of %zu; no worse on %lld of %lld "
          "prompts\n",
          name.c_str(), ours, theirs, ratio, median_ratio, kFlipNats,
          static_cast<long long>(flips(our_errors)), static_cast<long long>(flips(their_errors)),
          our_errors.size(), static_cast<long long>(no_worse), static_cast<long long>(prompts));
    }
    nlohmann::json line = {{"bench", "numerics"},
                           {"measure", name + " bf16 mean |logprob error|"},
                           {"value", ours},
                           {"unit", "nats"},
                           {"transformers", theirs},
                           {"ratio_to_transformers", ratio},
                           {"median_ratio_to_transformers", median_ratio},
                           {"positions", our_errors.size()},
                           {"flips", flips(our_errors)},
                           {"transformers_flips", flips(their_errors)},
                           {"prompts", prompts},
                           {"prompts_no_worse", no_worse}};
    std::cout << line.dump() << std::endl;
  }
  return 0;
}
