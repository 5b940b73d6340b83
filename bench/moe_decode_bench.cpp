// Decode speed of a mixture-of-experts model next to Hugging Face transformers on the same
// checkpoint, dtype and thread count (bench/hf_decode_peer.py, run by the python that
// HOTSWAP_PEER_PYTHON names; without it the peer is skipped and the run says so). Greedy decode
// steps after a prefill, batch 1 and 8; hotswap and the peer take turns, --reps times each, and
// every figure is the median with its range.
//
//   hotswap_moe_decode_bench [--arch qwen3_moe|mixtral] [--reps 3] [--steps 32] [--dir DIR]
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/decode_steps.hpp"
#include "model_loader/architecture_registry.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;
using bench::since;

namespace {

// A small MoE in the shape of the real ones (many narrow experts, a few per token).
model_loader::ModelConfig moe_config(const std::string& model_type) {
  nlohmann::json json = {
      {"architectures",
       {model_loader::ArchitectureRegistry::builtin().find_by_model_type(model_type).name}},
      {"hidden_size", 512},
      {"intermediate_size", 256},
      {"moe_intermediate_size", 256},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 4},
      {"head_dim", 64},
      {"vocab_size", 8000},
      {"num_experts", 32},
      {"num_local_experts", 32},
      {"num_experts_per_tok", 4},
      {"norm_topk_prob", true},
      {"max_position_embeddings", 4096},
      {"torch_dtype", "bfloat16"},
  };
  return model_loader::ModelConfig::from_json(json);
}

}  // namespace

int main(int argc, char** argv) {
  std::string arch = "qwen3_moe";
  int reps = 3, steps = 32;
  fs::path dir = fs::temp_directory_path() / "hotswap-moe-decode-bench";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    if (flag == "--arch") arch = argv[i + 1];
    if (flag == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--steps") steps = std::max(1, std::atoi(argv[i + 1]));
    if (flag == "--dir") dir = argv[i + 1];
  }
  auto config = moe_config(arch);
  const std::uint64_t bytes = bench::write_bench_checkpoint(dir, config);
  auto model = model_loader::load_model(dir);
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  const char* python = bench::peer_python();
  std::printf("model: %s, %.0f MB bf16, %lld experts of %lld, %lld per token, %u threads\n",
              config.architecture_name().c_str(), bytes / 1e6,
              static_cast<long long>(config.num_experts),
              static_cast<long long>(config.moe_intermediate_size),
              static_cast<long long>(config.num_experts_per_tok), threads);
  if (python == nullptr) bench::say_peer_skipped();

  for (int batch : {1, 8}) {
    bench::decode_tokens_per_second(*model, batch, 4);  // warm-up
    std::vector<double> ours, peer;
    for (int r = 0; r < reps; ++r) {  // interleaved: both see the same machine weather
      ours.push_back(bench::decode_tokens_per_second(*model, batch, steps));
      if (python != nullptr) {
        if (auto t = bench::peer_decode(HOTSWAP_BENCH_DIR, dir, batch, bench::kDecodePromptTokens,
                                        steps, threads)) {
          peer.push_back(*t);
        }
      }
    }
    auto a = bench::spread_of(ours);
    nlohmann::json extra = {{"batch", batch}, {"hotswap", a.to_json()}};
    std::string line = "decode batch " + std::to_string(batch);
    if (!peer.empty()) {
      auto b = bench::spread_of(peer);
      extra["transformers"] = b.to_json();
      extra["ratio_to_transformers"] = a.median / b.median;
      std::printf("%s: hotswap %.1f tokens/s (%.1f–%.1f), transformers %.1f (%.1f–%.1f): %.2f×\n",
                  line.c_str(), a.median, a.low, a.high, b.median, b.low, b.high,
                  a.median / b.median);
    } else if (python != nullptr) {
      std::printf("%s: the peer failed to run (see bench/hf_decode_peer.py)\n", line.c_str());
    }
    bench::report("moe_decode", line, a.median, "tokens/s", extra);
  }
  fs::remove_all(dir);
  return 0;
}
