// model_loader figures on a synthetic Llama of a few hundred MB:
//  - checkpoint load speed (GB/s), each repetition right after a plain sequential read() of the
//    same files (both from a warm page cache: the files were just written), and the ratio of the
//    medians;
//  - generation speed: prefill tokens/s and decode tokens/s at batch 1 and batch 8.
// Every figure is the median of `--reps` repetitions (5) with its range. Prints a table and one
// JSON line per figure (`--json`: the JSON lines only).
//
// Usage: hotswap_model_loader_bench [--reps N] [--json] [DIR]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"
#include "model_loader/synthetic_checkpoint.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;

using bench::plain_read;
using bench::since;

namespace {

constexpr int kDecodeSteps = 8;

void report(const std::string& name, double value, const std::string& unit,
            const nlohmann::json& extra = nlohmann::json::object()) {
  bench::report("model_loader", name, value, unit, extra);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = fs::temp_directory_path() / "hotswap-bench-model";
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      bench::json_only() = true;
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      dir = arg;
    }
  }
  model_loader::ModelConfig c;
  c.architecture = model_loader::architectures::kLlama;
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.vocab_size = 32000;
  c.max_position_embeddings = 4096;
  c.torch_dtype = protocol::DType::kBFloat16;
  c = model_loader::ModelConfig::from_json(c.to_json());

  auto start = Clock::now();
  model_loader::SyntheticCheckpointOptions synthetic;
  synthetic.seed = 1;
  std::uint64_t bytes = model_loader::write_synthetic_checkpoint(dir, c, synthetic);
  report("synthetic checkpoint write", bytes / since(start) / 1e9, "GB/s", {{"bytes", bytes}});

  plain_read(dir);  // warm the page cache for both measurements
  std::vector<double> reads, loads;
  std::shared_ptr<model_loader::ServableModel> model;
  for (int rep = 0; rep < reps; ++rep) {
    start = Clock::now();
    const std::uint64_t read_bytes = plain_read(dir);
    reads.push_back(read_bytes / since(start) / 1e9);
    model.reset();  // the previous load's memory goes first, as a worker's restart would
    start = Clock::now();
    model = model_loader::load_model(dir);
    loads.push_back(bytes / since(start) / 1e9);
  }
  bench::report_against_limit("model_loader", "checkpoint load", loads, reads, "GB/s",
                              "ratio_to_plain_read", false, {{"bytes", bytes}});
  std::vector<std::int64_t> prompt(128);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<std::int64_t>(i * 7 % 32000);
  model_loader::SamplingParams one;
  one.temperature = 0;
  one.max_tokens = 1;
  model_loader::generate(*model, {prompt}, one);  // warm-up
  std::vector<double> prefill;
  for (int rep = 0; rep < reps; ++rep) {
    start = Clock::now();
    model_loader::generate(*model, {prompt}, one);
    prefill.push_back(prompt.size() / since(start));
  }
  bench::report_spread("model_loader", "prefill (128-token prompt)", prefill, "tokens/s");

  for (int batch : {1, 8}) {
    model_loader::SamplingParams params;
    params.temperature = 0;
    params.max_tokens = kDecodeSteps + 1;
    std::vector<std::vector<std::int64_t>> prompts(
        batch, std::vector<std::int64_t>(prompt.begin(), prompt.begin() + 16));
    std::vector<double> rates;
    for (int rep = 0; rep < reps; ++rep) {
      // Time 8 decode steps after the first (prefill) token: five repetitions of them cost less
      // than one of 32 did, and the median of five is the steadier figure.
      std::vector<model_loader::Sequence> sequences;
      for (auto& p : prompts)
        sequences.emplace_back(p, params);
      std::vector<model_loader::Sequence*> pointers;
      for (auto& seq : sequences)
        pointers.push_back(&seq);
      model_loader::step(*model, pointers);
      start = Clock::now();
      for (int i = 0; i < kDecodeSteps; ++i)
        model_loader::step(*model, pointers);
      rates.push_back(batch * kDecodeSteps / since(start));
    }
    bench::report_spread("model_loader", "decode batch " + std::to_string(batch), rates, "tokens/s",
                         {{"batch", batch}});
  }
  if (!bench::json_only()) {
    std::printf("model: %s, %.0f MB bf16, %u threads\n", std::string(c.architecture_name()).c_str(),
                bytes / 1e6, std::thread::hardware_concurrency());
  }
  fs::remove_all(dir);
  return 0;
}
