// Control-path costs that run once per round on both sides: grouping the parameter names and
// planning packed chunks. They must stay negligible next to moving the bytes, so the figures
// are printed next to the time one memcpy of the same model would take on this machine.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "protocol/chunk_plan.hpp"
#include "protocol/layerwise_groups.hpp"

using namespace hotswap::protocol;

namespace {

// A Llama-shaped name list: embeddings, `layers` decoder layers of 9 tensors, norm and head;
// `experts` > 0 replaces the MLP with that many experts of three tensors each (MoE).
std::vector<ParamMeta> model_params(int layers, int experts, std::int64_t hidden) {
  std::vector<ParamMeta> out;
  auto add = [&](std::string name, std::vector<std::int64_t> shape) {
    out.push_back(ParamMeta{std::move(name), DType::kBFloat16, std::move(shape)});
  };
  add("model.embed_tokens.weight", {32000, hidden});
  for (int l = 0; l < layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {hidden});
    for (const char* w : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      add(p + "self_attn." + w + ".weight", {hidden, hidden});
    }
    add(p + "post_attention_layernorm.weight", {hidden});
    if (experts == 0) {
      for (const char* w : {"gate_proj", "up_proj", "down_proj"}) {
        add(p + "mlp." + w + ".weight", {hidden * 4, hidden});
      }
    } else {
      for (int e = 0; e < experts; ++e) {
        for (const char* w : {"w1", "w2", "w3"}) {
          add(p + "mlp.experts." + std::to_string(e) + "." + w, {hidden / 2, hidden});
        }
      }
    }
  }
  add("model.norm.weight", {hidden});
  add("lm_head.weight", {32000, hidden});
  return out;
}

std::vector<std::string> names_of(const std::vector<ParamMeta>& params) {
  std::vector<std::string> out;
  for (const auto& p : params)
    out.push_back(p.name);
  return out;
}

void BM_layerwise_groups(benchmark::State& state) {
  auto names = names_of(
      model_params(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 1024));
  for (auto _ : state)
    benchmark::DoNotOptimize(layerwise_groups(names));
  state.counters["names"] = static_cast<double>(names.size());
}
BENCHMARK(BM_layerwise_groups)->Args({80, 0})->Args({48, 128})->Unit(benchmark::kMicrosecond);

void BM_plan_nccl_chunks(benchmark::State& state) {
  auto params =
      model_params(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 1024);
  for (auto _ : state)
    benchmark::DoNotOptimize(plan_nccl_chunks(params, 64 << 20));
  state.counters["params"] = static_cast<double>(params.size());
}
BENCHMARK(BM_plan_nccl_chunks)->Args({80, 0})->Args({48, 128})->Unit(benchmark::kMicrosecond);

void BM_plan_ipc_chunks(benchmark::State& state) {
  auto params =
      model_params(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)), 1024);
  for (auto _ : state)
    benchmark::DoNotOptimize(plan_ipc_chunks(params, 64 << 20));
}
BENCHMARK(BM_plan_ipc_chunks)->Args({80, 0})->Args({48, 128})->Unit(benchmark::kMicrosecond);

// The machine's own limit, for scale: single-thread memcpy bandwidth over 256 MiB.
void BM_memcpy_limit(benchmark::State& state) {
  std::vector<char> src(256 << 20, 1), dst(256 << 20);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                          static_cast<std::int64_t>(src.size()));
}
BENCHMARK(BM_memcpy_limit)->Unit(benchmark::kMillisecond)->Iterations(8);

}  // namespace

BENCHMARK_MAIN();
