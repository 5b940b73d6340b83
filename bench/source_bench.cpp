// The trainer side's per-round walk over a source, per tensor (iter()) and per layerwise group
// (iter_groups()), on name lists the size of real models: a dense Llama and a mixture of
// experts with 128 experts per layer, where per-tensor streams are the slow case
// iter_groups() exists for. The tensors are tiny, so the figures are the walk's own cost.
#include <benchmark/benchmark.h>

#include <ATen/ops/zeros.h>

#include <string>
#include <utility>
#include <vector>

#include "trainer_sdk/tensor_list_source.hpp"

using namespace hotswap;

namespace {

// Embeddings, `layers` decoder layers (attention, norms, and either a dense MLP or `experts`
// experts of three tensors each), final norm and head: as checkpoints name them.
std::shared_ptr<trainer_sdk::TensorListSource> source(int layers, int experts) {
  at::Tensor t = at::zeros({4});
  std::vector<std::pair<std::string, at::Tensor>> named;
  named.emplace_back("model.embed_tokens.weight", t);
  for (int l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* w : {"input_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "post_attention_layernorm"}) {
      named.emplace_back(p + w + ".weight", t);
    }
    if (experts == 0) {
      for (const char* w : {"gate_proj", "up_proj", "down_proj"})
        named.emplace_back(p + "mlp." + w + ".weight", t);
      continue;
    }
    named.emplace_back(p + "mlp.gate.weight", t);
    for (int e = 0; e < experts; ++e) {
      for (const char* w : {"gate_proj", "up_proj", "down_proj"}) {
        named.emplace_back(p + "mlp.experts." + std::to_string(e) + "." + w + ".weight", t);
      }
    }
  }
  named.emplace_back("model.norm.weight", t);
  named.emplace_back("lm_head.weight", t);
  return std::make_shared<trainer_sdk::TensorListSource>(named);
}

void BM_iter_per_tensor(benchmark::State& state) {
  auto src = source(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::size_t n = 0;
  for (auto _ : state) {
    auto stream = src->iter();
    n = 0;
    while (auto w = stream->next()) {
      benchmark::DoNotOptimize(w->tensor.data_ptr());
      ++n;
    }
  }
  state.counters["tensors"] = static_cast<double>(n);
}
BENCHMARK(BM_iter_per_tensor)->Args({80, 0})->Args({48, 128})->Unit(benchmark::kMillisecond);

void BM_iter_groups(benchmark::State& state) {
  auto src = source(static_cast<int>(state.range(0)), static_cast<int>(state.range(1)));
  std::size_t groups = 0;
  for (auto _ : state) {
    auto stream = src->iter_groups();
    groups = 0;
    while (auto g = stream->next()) {
      benchmark::DoNotOptimize(g->tensors.data());
      ++groups;
    }
  }
  state.counters["groups"] = static_cast<double>(groups);
}
BENCHMARK(BM_iter_groups)->Args({80, 0})->Args({48, 128})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
