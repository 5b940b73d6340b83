// Decode speed with LoRA adapters in the batch against the base model alone, in one run: a batch
// of 8 sequences decoding greedily after their prefill, with no adapter, every sequence on one
// adapter, 4 adapters (2 sequences each) and 8 (one each). Adapters are rank 16 on the q/k/v/o
// and gate/up/down projections of every layer, written in PEFT's format and loaded as a worker
// loads them. The four take turns, --reps times each; figures are medians with their range, and
// each adapted figure's ratio to the base model's of the same repetition.
//
//   hotswap_lora_decode_bench [--reps 5] [--steps 32] [--dir DIR] [--json]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/decode_steps.hpp"
#include "bench/lora_adapter_files.hpp"
#include "model_loader/lora/lora_adapter.hpp"
#include "model_loader/servable_model.hpp"

using namespace hotswap;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kRank = 16;
constexpr int kBatch = 8;

}  // namespace

int main(int argc, char** argv) {
  int reps = 5, steps = 32;
  fs::path dir = fs::temp_directory_path() / "hotswap-lora-decode-bench";
  bench::BenchFlags{{{"--reps", &reps}, {"--steps", &steps}}, {{"--dir", &dir}}}.parse(argc, argv);
  const auto config = bench::bench_llama();
  fs::remove_all(dir);
  const std::uint64_t bytes = bench::write_bench_checkpoint(dir / "model", config);
  auto model = model_loader::load_model(dir / "model");
  std::vector<std::shared_ptr<const model_loader::LoraAdapter>> adapters;
  for (int a = 0; a < 8; ++a) {
    const fs::path path = dir / ("adapter" + std::to_string(a));
    bench::write_lora_adapter(
        path, kRank,
        bench::random_lora_tensors(config, kRank, 100 + static_cast<std::uint64_t>(a)));
    adapters.push_back(model->load_lora_adapter(path, kRank));
  }
  if (!bench::json_only()) {
    std::printf(
        "model: %s, %.0f MB bf16, %lld layers; adapters rank %lld on 7 projections, "
        "%.1f MB each; batch %d, %d decode steps\n",
        config.architecture_name().c_str(), bytes / 1e6,
        static_cast<long long>(config.num_hidden_layers), static_cast<long long>(kRank),
        adapters[0]->nbytes() / 1e6, kBatch, steps);
  }
  const std::vector<int> counts = {1, 4, 8};
  bench::decode_tokens_per_second(*model, kBatch, 4);  // warm-up
  std::vector<double> base;
  std::vector<std::vector<double>> adapted(counts.size());
  for (int r = 0; r < reps; ++r) {  // interleaved: every case sees the same machine weather
    base.push_back(bench::decode_tokens_per_second(*model, kBatch, steps));
    for (std::size_t c = 0; c < counts.size(); ++c) {
      const std::vector<std::shared_ptr<const model_loader::LoraAdapter>> in_batch(
          adapters.begin(), adapters.begin() + counts[c]);
      adapted[c].push_back(bench::decode_tokens_per_second(*model, kBatch, steps, in_batch));
    }
  }
  bench::report("lora_decode", "decode, base model", bench::spread_of(base).median, "tokens/s",
                {{"spread", bench::spread_of(base).to_json()}, {"batch", kBatch}});
  for (std::size_t c = 0; c < counts.size(); ++c) {
    bench::report_against_limit("lora_decode",
                                "decode, " + std::to_string(counts[c]) + " adapter" +
                                    (counts[c] > 1 ? "s" : "") + " in the batch",
                                adapted[c], base, "tokens/s", "ratio_to_base", false,
                                {{"adapters", counts[c]}, {"batch", kBatch}, {"rank", kRank}});
  }
  fs::remove_all(dir);
  return 0;
}
