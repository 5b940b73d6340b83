// hotswap_prefill_memory_bench: how a prefill's peak memory grows with the prompt. For prompts
// of 1k to 16k tokens, the peak resident set above the process's resident set before the step
// (VmHWM, reset through /proc/self/clear_refs before each measurement), for:
//   - the model's prefill (a generated Llama, 4 layers, 256 wide, 4 heads, float32), whose
//     attention runs in chunks of queries (model_loader/causal_attention.hpp);
//   - attention alone at the model's shape, in chunks, against the same attention in one pass
//     (the quadratic score matrix the worker used to build), measured in the same run, up to
//     8k tokens (one pass at 16k would need about 13 GB).
// Repetitions are interleaved (every length once, then again); figures are medians with their
// range.
//
// Usage: hotswap_prefill_memory_bench [--reps N] [--json]
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>

#include <malloc.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "model_loader/causal_attention.hpp"
#include "model_loader/servable_model.hpp"
#include "model_loader/synthetic_checkpoint.hpp"

using namespace hotswap;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kHeads = 4, kHeadDim = 64;

// Resets this process's peak resident set to what is resident now (Linux 4.0 and later).
void reset_peak() {
  ::malloc_trim(0);
  std::ofstream("/proc/self/clear_refs") << "5";
}

// Peak resident bytes above the resident set before `work`, in MB.
template <typename Work>
double peak_mb_of(Work&& work) {
  reset_peak();
  const std::uint64_t before = bench::status_bytes(::getpid(), "VmRSS");
  work();
  const std::uint64_t peak = bench::peak_rss(::getpid());
  return static_cast<double>(peak > before ? peak - before : 0) / 1e6;
}

model_loader::ModelConfig prefill_model() {
  model_loader::ModelConfig c;
  c.hidden_size = kHeads * kHeadDim;
  c.intermediate_size = 512;
  c.num_hidden_layers = 4;
  c.num_attention_heads = kHeads;
  c.num_key_value_heads = 2;
  c.head_dim = kHeadDim;
  c.vocab_size = 1024;
  c.max_position_embeddings = 32768;
  c.torch_dtype = protocol::DType::kFloat32;
  return model_loader::ModelConfig::from_json(c.to_json());
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (arg == "--json") {
      bench::json_only() = true;
    } else {
      std::cerr << "hotswap_prefill_memory_bench: unknown argument '" << arg
                << "' (usage: hotswap_prefill_memory_bench [--reps N] [--json])\n";
      return 2;
    }
  }
  const fs::path dir =
      fs::temp_directory_path() / ("hotswap-prefill-memory-" + std::to_string(::getpid()));
  model_loader::write_synthetic_checkpoint(dir, prefill_model());
  auto model = model_loader::load_model(dir, {});

  const std::vector<std::int64_t> lengths = {1024, 2048, 4096, 8192, 16384};
  constexpr std::int64_t kOnePassUpTo = 8192;
  std::map<std::int64_t, std::vector<double>> prefill, chunked, one_pass;
  for (int rep = 0; rep < reps; ++rep) {
    for (std::int64_t n : lengths) {
      at::Tensor tokens = at::randint(prefill_model().vocab_size, {n}, at::kLong);
      prefill[n].push_back(peak_mb_of([&] {
        model_loader::KvCache cache;
        std::vector<model_loader::ForwardSlice> slices{{&cache, n}};
        model->forward(tokens, slices);
      }));
      at::Tensor q = at::randn({kHeads, n, kHeadDim});
      at::Tensor k = at::randn({kHeads, n, kHeadDim});
      at::Tensor v = at::randn({kHeads, n, kHeadDim});
      const double scaling = 0.125;
      chunked[n].push_back(
          peak_mb_of([&] { model_loader::causal_attention(q, k, v, 0, scaling, std::nullopt); }));
      if (n <= kOnePassUpTo) {
        one_pass[n].push_back(peak_mb_of([&] {
          model_loader::causal_attention(q, k, v, 0, scaling, std::nullopt,
                                         std::numeric_limits<std::int64_t>::max());
        }));
      }
    }
  }
  for (std::int64_t n : lengths) {
    const std::string tokens = std::to_string(n) + " tokens";
    bench::report_spread("prefill_memory", "prefill peak RSS above baseline, " + tokens, prefill[n],
                         "MB", {{"tokens", n}});
    if (one_pass.contains(n)) {
      bench::report_against_limit("prefill_memory", "attention peak RSS in chunks, " + tokens,
                                  chunked[n], one_pass[n], "MB", "ratio_to_one_pass", false,
                                  {{"tokens", n}});
    } else {
      bench::report_spread("prefill_memory", "attention peak RSS in chunks, " + tokens, chunked[n],
                           "MB", {{"tokens", n}});
    }
  }
  fs::remove_all(dir);
  return 0;
}
