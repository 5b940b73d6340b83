// The GPU's step path run on the CPU: LlamaModel over the reference kernels (what FlashInfer's
// compute, in libtorch) and the eager graph recorder, against its libtorch path. What is checked
// is the path's own logic: the step metadata, the planning, the padding of decode steps to their
// graph's size, the scratch block, and the switch between graph sets when a staged commit moves
// the weights.
#include "model_loader/blocks/kernel_step_runner.hpp"

#include <boost/test/unit_test.hpp>

#include <thread>

#include "model_loader/architectures/llama_model.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/kernels/flashinfer_kernels.hpp"
#include "model_loader/kernels/step_kernels.hpp"
#include "model_loader/kv_cache_budget.hpp"
#include "model_test_support.hpp"
#include "protocol/errors.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using testing::CheckpointDir;
using testing::max_abs_diff;

namespace {

const std::vector<std::int64_t> kPrompt = {3, 17, 42, 5, 9, 61, 7, 20, 1, 33};

// The kernel path on the CPU: reference kernels, graphs of 1, 2 and 4 rows, replayed eagerly.
model_loader::ModelOptions reference_kernels(std::vector<std::int64_t> sizes = {1, 2, 4}) {
  model_loader::ModelOptions options;
  options.step_kernels.backend = model_loader::AttentionBackend::kReference;
  options.step_kernels.cuda_graph_sizes = std::move(sizes);
  options.step_kernels.max_num_seqs = 4;
  return options;
}

const model_loader::kernels::DecodeGraphCache& graphs_of(const model_loader::ServableModel& m) {
  const auto* runner = dynamic_cast<const model_loader::LlamaModel&>(m).kernel_step_runner();
  BOOST_REQUIRE(runner != nullptr);
  BOOST_REQUIRE(runner->graphs() != nullptr);
  return *runner->graphs();
}

model_loader::SamplingParams greedy(std::int64_t max_tokens) {
  model_loader::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  return params;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kernel_step_path)

BOOST_AUTO_TEST_CASE(every_dense_architecture_decodes_as_its_libtorch_path_does) {
  // Llama's rope scaling, Mistral's sliding window, Qwen2's qkv bias, Qwen3's per-head norms.
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3}) {
    BOOST_TEST_CONTEXT(arch) {
      CheckpointDir ckpt(testing::tiny_config(arch), 21);
      auto libtorch = ckpt.load();
      auto kernels = ckpt.load(reference_kernels());
      // Three prompts: a decode step of three rows runs the graph of four, one row padding.
      const std::vector<std::vector<std::int64_t>> prompts = {
          kPrompt, {5, 4, 3}, {kPrompt.begin(), kPrompt.begin() + 7}};
      const auto expected = model_loader::generate(*libtorch, prompts, greedy(8));
      const auto got = model_loader::generate(*kernels, prompts, greedy(8));
      for (std::size_t i = 0; i < prompts.size(); ++i) {
        BOOST_TEST(got[i].token_ids == expected[i].token_ids);
        for (std::size_t t = 0; t < got[i].logprobs.size(); ++t)
          BOOST_TEST(std::abs(got[i].logprobs[t] - expected[i].logprobs[t]) < 1e-4);
      }
      const auto& graphs = graphs_of(*kernels);
      BOOST_TEST(graphs.captures() >= 1u);
      BOOST_TEST(graphs.replays() >= 1u);
    }
  }
}

BOOST_AUTO_TEST_CASE(prefill_and_decode_logits_match_and_padding_changes_nothing) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kQwen3), 22);
  auto libtorch = ckpt.load();
  auto kernels = ckpt.load(reference_kernels());
  // A mixed step (a prefill beside a decode) runs eagerly; the next, two decodes, runs the graph
  // of two; one alone runs the graph of one.
  auto run = [&](model_loader::ServableModel& m) {
    model_loader::KvCache a, b;
    std::vector<model_loader::ForwardSlice> first{{&a, 6}};
    std::vector<std::int64_t> head(kPrompt.begin(), kPrompt.begin() + 6);
    std::vector<at::Tensor> out{m.forward(testing::long_tensor(head), first)};
    std::vector<model_loader::ForwardSlice> mixed{{&a, 1}, {&b, 3}};
    out.push_back(m.forward(testing::long_tensor({kPrompt[6], 5, 4, 3}), mixed));
    std::vector<model_loader::ForwardSlice> both{{&a, 1}, {&b, 1}};
    out.push_back(m.forward(testing::long_tensor({kPrompt[7], 9}), both));
    std::vector<model_loader::ForwardSlice> alone{{&b, 1}};
    out.push_back(m.forward(testing::long_tensor({11}), alone));
    // Every position's logits (a prompt's logprobs): eager, every row returned.
    model_loader::KvCache c;
    std::vector<model_loader::ForwardSlice> scored{{&c, 5}};
    out.push_back(m.forward(testing::long_tensor({1, 2, 3, 4, 5}), scored, true));
    return out;
  };
  const auto expected = run(*libtorch);
  const auto got = run(*kernels);
  BOOST_REQUIRE(got.size() == expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    BOOST_TEST_CONTEXT("step " << i) {
      BOOST_TEST(got[i].sizes() == expected[i].sizes());
      BOOST_TEST(max_abs_diff(got[i], expected[i]) < 1e-4);
    }
  }
  const auto& graphs = graphs_of(*kernels);
  BOOST_TEST(graphs.captures() == 2u);  // sizes 2 and 1
  BOOST_TEST(graphs.eager_steps() == 0u);
}

BOOST_AUTO_TEST_CASE(steps_from_two_threads_take_turns_over_the_shared_buffers) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 27);
  auto libtorch = ckpt.load();
  auto kernels = ckpt.load(reference_kernels());
  const std::vector<std::vector<std::int64_t>> first = {kPrompt, {5, 4, 3}}, second = {{9, 8}};
  const auto expected_first = model_loader::generate(*libtorch, first, greedy(12));
  const auto expected_second = model_loader::generate(*libtorch, second, greedy(12));
  // Each generation's decode steps replay graphs over the runner's one set of buffers.
  std::vector<model_loader::GenerationResult> got_second;
  std::thread other([&] { got_second = model_loader::generate(*kernels, second, greedy(12)); });
  const auto got_first = model_loader::generate(*kernels, first, greedy(12));
  other.join();
  BOOST_TEST(got_first[0].token_ids == expected_first[0].token_ids);
  BOOST_TEST(got_first[1].token_ids == expected_first[1].token_ids);
  BOOST_TEST(got_second[0].token_ids == expected_second[0].token_ids);
}

BOOST_AUTO_TEST_CASE(decodes_past_the_largest_graph_run_eagerly) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 23);
  auto libtorch = ckpt.load();
  auto kernels = ckpt.load(reference_kernels({1, 2}));
  const std::vector<std::vector<std::int64_t>> prompts = {{1, 2}, {3, 4, 5}, {6}};
  BOOST_TEST(model_loader::generate(*kernels, prompts, greedy(4))[2].token_ids ==
             model_loader::generate(*libtorch, prompts, greedy(4))[2].token_ids);
  // Three sequences never fit a graph of two: every decode step ran eagerly.
  BOOST_TEST(graphs_of(*kernels).captures() == 0u);
}

BOOST_AUTO_TEST_CASE(a_staged_commit_switches_graph_sets_and_serves_the_new_weights) {
  const auto config = testing::tiny_config(architectures::kLlama);
  CheckpointDir first(config, 24), second(config, 25);
  auto libtorch = first.load();
  auto kernels = first.load(reference_kernels());
  auto update = [](model_loader::ServableModel& m, const CheckpointDir& to) {
    m.start_reload();
    m.load_weights(to.tensors());
    m.finish_reload();
  };
  auto tokens = [](model_loader::ServableModel& m) {
    return model_loader::generate(m, {kPrompt, {5, 4, 3}}, greedy(5));
  };
  auto same = [](const auto& a, const auto& b) {
    return a[0].token_ids == b[0].token_ids && a[1].token_ids == b[1].token_ids;
  };
  BOOST_TEST(same(tokens(*kernels), tokens(*libtorch)));
  const auto& graphs = graphs_of(*kernels);
  const auto captures_on_first = graphs.captures();
  // The commit swaps in the shadows: new addresses, a second graph set, captured on its first
  // steps, and the new weights' tokens from the first step on.
  update(*libtorch, second);
  update(*kernels, second);
  BOOST_TEST(same(tokens(*kernels), tokens(*libtorch)));
  BOOST_TEST(graphs.storage_sets() == 2u);
  const auto captures_on_second = graphs.captures();
  BOOST_TEST(captures_on_second > captures_on_first);
  // The next commit goes back to the first set's addresses: its graphs serve again, nothing is
  // captured.
  update(*libtorch, first);
  update(*kernels, first);
  BOOST_TEST(same(tokens(*kernels), tokens(*libtorch)));
  BOOST_TEST(graphs.captures() == captures_on_second);
  BOOST_TEST(graphs.storage_sets() == 2u);
}

BOOST_AUTO_TEST_CASE(the_memory_budget_sets_aside_the_graphs_pool_and_the_workspaces) {
  const auto c = testing::tiny_config(architectures::kLlama);
  using model_loader::kernels::CudaGraphSizes;
  // Eager: the attention's workspaces (136 MiB) and the rotary table (64 positions x 8 x 4 B).
  const std::uint64_t eager =
      model_loader::KernelStepRunner::device_bytes(c, CudaGraphSizes({}, 8, true), 2);
  BOOST_TEST(eager == (std::uint64_t{136} << 20) + 64 * 8 * 4);
  // With graphs up to 8 rows: a step of 8 rows' temporaries, and 8 rows of float32 logits.
  const std::uint64_t graphed =
      model_loader::KernelStepRunner::device_bytes(c, CudaGraphSizes({1, 2, 8}, 8, false), 2);
  BOOST_TEST(graphed ==
             eager + model_loader::estimate_step_activation_bytes(c, 8, 8, 2) + 8 * 64 * 4);
}

BOOST_AUTO_TEST_CASE(flashinfer_refuses_what_it_cannot_run_by_name) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 26);
  model_loader::ModelOptions options;
  options.step_kernels.backend = model_loader::AttentionBackend::kFlashInfer;
  // On this machine's CPU (or a build without the kernels), the path says why it cannot run.
  HOTSWAP_CHECK_THROW_MSG(ckpt.load(options), protocol::ValueError,
                          "--attention-backend FLASHINFER");
  model_loader::kernels::StepKernelShape shape;
  shape.q_heads = 4;
  shape.kv_heads = 2;
  shape.head_dim = 96;
  shape.block_size = 16;
  const auto why =
      model_loader::kernels::flashinfer_refusal(shape, at::kBFloat16, c10::Device("cuda:0"));
  BOOST_REQUIRE(why.has_value());
  if (model_loader::kernels::kernels_built()) {
    BOOST_TEST(*why == "the GPU kernels' attention runs head dims 64 and 128, not 96");
  }
}

BOOST_AUTO_TEST_CASE(kernel_step_inputs_lay_out_ragged_sequences_as_flashinfer_reads_them) {
  using model_loader::kernels::KernelStepInputs;
  using model_loader::kernels::KernelStepSequence;
  const c10::Device cpu(c10::kCPU);
  // Position 16 needs a third block of 8: a sequence holding two is refused by name.
  const std::vector<std::int32_t> two{7, 2}, three{7, 2, 9}, one{5};
  const std::vector<KernelStepSequence> short_of_blocks{{14, 3, two}};
  HOTSWAP_CHECK_THROW_MSG(KernelStepInputs::make(short_of_blocks, 8, cpu), protocol::ValueError,
                          "kernel step: sequence 0 of 3 tokens from position 14 needs 3 blocks "
                          "of 8; it holds 2");
  const std::vector<KernelStepSequence> sequences{{14, 3, three}, {0, 1, one}};
  const auto step = KernelStepInputs::make(sequences, 8, cpu);
  auto list = [](const at::Tensor& t) {
    return std::vector<std::int32_t>(t.data_ptr<std::int32_t>(),
                                     t.data_ptr<std::int32_t>() + t.numel());
  };
  BOOST_TEST(step.rows == 4);
  BOOST_TEST(step.sequences == 2);
  BOOST_TEST(!step.decode);
  BOOST_TEST(list(step.positions) == (std::vector<std::int32_t>{14, 15, 16, 0}));
  BOOST_TEST(list(step.sequence_of) == (std::vector<std::int32_t>{0, 0, 0, 1}));
  BOOST_TEST(list(step.q_indptr) == (std::vector<std::int32_t>{0, 3, 4}));
  BOOST_TEST(step.q_indptr_host == (std::vector<std::int32_t>{0, 3, 4}));
  BOOST_TEST(list(step.page_indptr) == (std::vector<std::int32_t>{0, 3, 4}));
  BOOST_TEST(list(step.page_indices) == (std::vector<std::int32_t>{7, 2, 9, 5}));
  BOOST_TEST(list(step.last_page_len) == (std::vector<std::int32_t>{1, 1}));
}

BOOST_AUTO_TEST_SUITE_END()
