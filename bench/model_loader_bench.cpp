// model_loader figures on a synthetic Llama of a few hundred MB:
//  - checkpoint load speed (GB/s) next to a plain sequential read() of the same files, taken in
//    the same run (both from a warm page cache: the files were just written);
//  - generation speed: prefill tokens/s and decode tokens/s at batch 1 and batch 8.
// Prints a table and one JSON line per measurement.
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

void report(const std::string& name, double value, const std::string& unit,
            const nlohmann::json& extra = nlohmann::json::object()) {
  bench::report("model_loader", name, value, unit, extra);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = argc > 1 ? fs::path(argv[1]) : fs::temp_directory_path() / "hotswap-bench-model";
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
  start = Clock::now();
  std::uint64_t read_bytes = plain_read(dir);
  double read_gbps = read_bytes / since(start) / 1e9;
  report("plain sequential read (limit)", read_gbps, "GB/s", {{"bytes", read_bytes}});

  start = Clock::now();
  auto model = model_loader::load_model(dir);
  double load_gbps = bytes / since(start) / 1e9;
  report("checkpoint load", load_gbps, "GB/s",
         {{"bytes", bytes}, {"ratio_to_plain_read", load_gbps / read_gbps}});

  std::vector<std::int64_t> prompt(128);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<std::int64_t>(i * 7 % 32000);
  model_loader::SamplingParams one;
  one.temperature = 0;
  one.max_tokens = 1;
  model_loader::generate(*model, {prompt}, one);  // warm-up
  start = Clock::now();
  model_loader::generate(*model, {prompt}, one);
  report("prefill (128-token prompt)", prompt.size() / since(start), "tokens/s");

  for (int batch : {1, 8}) {
    model_loader::SamplingParams params;
    params.temperature = 0;
    params.max_tokens = 33;
    std::vector<std::vector<std::int64_t>> prompts(
        batch, std::vector<std::int64_t>(prompt.begin(), prompt.begin() + 16));
    // Time the 32 decode steps after the first (prefill) token.
    std::vector<model_loader::Sequence> sequences;
    for (auto& p : prompts)
      sequences.emplace_back(p, params);
    std::vector<model_loader::Sequence*> pointers;
    for (auto& s : sequences)
      pointers.push_back(&s);
    model_loader::step(*model, pointers);
    start = Clock::now();
    for (int i = 0; i < 32; ++i)
      model_loader::step(*model, pointers);
    report("decode batch " + std::to_string(batch), batch * 32 / since(start), "tokens/s",
           {{"batch", batch}});
  }
  std::printf("model: %s, %.0f MB bf16, %u threads\n", std::string(c.architecture_name()).c_str(),
              bytes / 1e6, std::thread::hardware_concurrency());
  fs::remove_all(dir);
  return 0;
}
