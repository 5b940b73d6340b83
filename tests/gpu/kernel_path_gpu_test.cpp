// The GPU step path on a GPU: every dense architecture in bfloat16 over FlashInfer's kernels,
// decode steps replayed as CUDA graphs, against the float32 CPU model, held to the error of the
// libtorch path on the same device; and a staged commit during graph-replayed decoding, served
// from the next step. Skipped without a GPU or where the kernels were not built.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/log_softmax.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/topk.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "model_loader/architectures/llama_model.hpp"
#include "model_loader/kernels/flashinfer_kernels.hpp"
#include "model_loader/model_test_support.hpp"
#include "needs_gpus.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using testing::CheckpointDir;
using testing::NeedsGpus;

namespace {

// A tiny model with head dims the kernels are built for (64), GQA groups of two.
model_loader::ModelConfig kernel_config(std::string_view arch) {
  auto c = testing::tiny_config(arch);
  c.hidden_size = 256;
  c.intermediate_size = 512;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.max_position_embeddings = 256;
  return model_loader::ModelConfig::from_json(c.to_json());
}

model_loader::ModelOptions bfloat16_on_gpu(model_loader::AttentionBackend backend) {
  model_loader::ModelOptions o;
  o.device = c10::Device(c10::kCUDA, 0);
  o.dtype = protocol::DType::kBFloat16;
  o.kv_cache_memory_bytes = std::uint64_t{64} << 20;
  o.step_kernels.backend = backend;
  o.step_kernels.cuda_graph_sizes = {1, 2, 4};
  o.step_kernels.max_num_seqs = 4;
  return o;
}

const std::vector<std::vector<std::int64_t>> kPrompts = {
    {3, 17, 42, 5, 9, 61, 7, 20, 1, 33, 400, 12, 90},  // 13 positions: a block and a bit
    {5, 4, 3},
    {100, 200, 300, 7, 8, 9, 10}};

// Log-probabilities [steps, sequences, vocab] of teacher-forced decoding: the prompts prefilled
// together (an eager step), then `tokens[s][i]` fed to sequence i at step s (three sequences: the
// graph of four, one row padding).
at::Tensor forced_logprobs(const model_loader::ServableModel& model,
                           const std::vector<std::vector<std::int64_t>>& tokens) {
  std::vector<model_loader::KvCache> caches(kPrompts.size());
  std::vector<model_loader::ForwardSlice> prefill;
  std::vector<std::int64_t> all;
  for (std::size_t i = 0; i < kPrompts.size(); ++i) {
    prefill.push_back({&caches[i], static_cast<std::int64_t>(kPrompts[i].size())});
    all.insert(all.end(), kPrompts[i].begin(), kPrompts[i].end());
  }
  std::vector<at::Tensor> steps{model.forward(testing::long_tensor(all), prefill)};
  for (const auto& fed : tokens) {
    std::vector<model_loader::ForwardSlice> decode;
    for (auto& cache : caches)
      decode.push_back({&cache, 1});
    steps.push_back(model.forward(testing::long_tensor(fed), decode));
  }
  return at::log_softmax(at::stack(steps).to(at::kCPU).to(at::kFloat), -1);
}

// The greedy tokens of `logprobs` [steps, sequences, vocab], as the next steps' inputs.
std::vector<std::vector<std::int64_t>> greedy_inputs(const at::Tensor& logprobs) {
  at::Tensor best = logprobs.argmax(-1);
  std::vector<std::vector<std::int64_t>> out;
  for (std::int64_t s = 0; s + 1 < best.size(0); ++s) {
    std::vector<std::int64_t> row;
    for (std::int64_t i = 0; i < best.size(1); ++i)
      row.push_back(best[s][i].item<std::int64_t>());
    out.push_back(row);
  }
  return out;
}

// Whether `got`'s greedy tokens are `expected`'s wherever the latter's top two log-probabilities
// are further apart than twice `error` (closer, rounding may pick either).
bool greedy_agrees(const at::Tensor& got, const at::Tensor& expected, double error) {
  auto top = at::topk(expected, 2, -1);
  at::Tensor margin = std::get<0>(top).select(-1, 0) - std::get<0>(top).select(-1, 1);
  at::Tensor same = got.argmax(-1) == expected.argmax(-1);
  return (same | (margin <= 2 * error)).all().item<bool>();
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(kernel_path_gpu, NeedsGpus<1>)

BOOST_AUTO_TEST_CASE(every_dense_architecture_through_graphs_tracks_float32_as_libtorch_does) {
  if (!model_loader::kernels::kernels_built()) {
    BOOST_TEST_MESSAGE("hotswap_kernels was built without the kernels");
    return;
  }
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3}) {
    BOOST_TEST_CONTEXT(arch) {
      CheckpointDir ckpt(kernel_config(arch), 41);
      auto reference = ckpt.load();  // float32 on the CPU
      // Ten steps the reference chose, fed to every model.
      std::vector<std::vector<std::int64_t>> fed(10, std::vector<std::int64_t>(3, 1));
      fed = greedy_inputs(forced_logprobs(*reference, fed));
      fed.resize(10, std::vector<std::int64_t>(3, 1));
      const at::Tensor expected = forced_logprobs(*reference, fed);
      auto libtorch = ckpt.load(bfloat16_on_gpu(model_loader::AttentionBackend::kTorch));
      auto kernels = ckpt.load(bfloat16_on_gpu(model_loader::AttentionBackend::kFlashInfer));
      const double libtorch_error =
          testing::max_abs_diff(forced_logprobs(*libtorch, fed), expected);
      const at::Tensor got = forced_logprobs(*kernels, fed);
      const double error = testing::max_abs_diff(got, expected);
      BOOST_TEST_MESSAGE(arch << ": logprob error " << error << ", libtorch's " << libtorch_error);
      // No larger than the libtorch path's on this device (a bfloat16 rounding of slack).
      BOOST_TEST(error <= std::max(1.25 * libtorch_error, 1e-2));
      BOOST_TEST(greedy_agrees(got, expected, error));
      const auto* runner =
          dynamic_cast<const model_loader::LlamaModel&>(*kernels).kernel_step_runner();
      BOOST_REQUIRE(runner != nullptr);
      BOOST_TEST(runner->graphs()->replays() >= 1u);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_staged_commit_during_graph_replays_serves_the_new_weights_next_step) {
  if (!model_loader::kernels::kernels_built()) {
    BOOST_TEST_MESSAGE("hotswap_kernels was built without the kernels");
    return;
  }
  const auto config = kernel_config(architectures::kLlama);
  CheckpointDir first(config, 42), second(config, 43);
  auto kernels = first.load(bfloat16_on_gpu(model_loader::AttentionBackend::kFlashInfer));
  auto libtorch = first.load(bfloat16_on_gpu(model_loader::AttentionBackend::kTorch));
  const std::vector<std::vector<std::int64_t>> fed(4, std::vector<std::int64_t>{7, 8, 9});
  for (int round = 0; round < 3; ++round) {
    const CheckpointDir& now = round % 2 == 0 ? second : first;
    for (auto* model : {kernels.get(), libtorch.get()}) {
      model->start_reload();
      model->load_weights(now.tensors());
      model->finish_reload();
    }
    BOOST_TEST(kernels->runtime_checksums("") == libtorch->runtime_checksums(""));
    // Each round's first steps capture (round 0) or reuse (rounds 1, 2) a graph set; a graph
    // replayed over the last round's weights would be far from the libtorch path's logprobs.
    const at::Tensor got = forced_logprobs(*kernels, fed);
    const at::Tensor expected = forced_logprobs(*libtorch, fed);
    const double error = testing::max_abs_diff(got, expected);
    BOOST_TEST(error < 5e-2, "round " << round);
    BOOST_TEST(greedy_agrees(got, expected, error), "round " << round);
  }
}

BOOST_AUTO_TEST_SUITE_END()
