// The Llama family sharded over tensor-parallel ranks, each rank a model in a thread of its own
// with a real gloo group on loopback between them: logits, checkpoint checksums, weight updates
// and sparse patches at tp = 2 (and tp = 4 with replicated KV heads) equal tp = 1's.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/abs.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/tensor.h>

#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "model_loader/architectures/llama_family.hpp"
#include "model_test_support.hpp"
#include "protocol/errors.hpp"
#include "transport/gloo_communicator.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
namespace architectures = model_loader::architectures;
using testing::CheckpointDir;
using testing::max_abs_diff;

namespace {

const std::vector<std::int64_t> kPrompt = {3, 17, 42, 5, 9, 61, 7, 20, 1, 33};

model_loader::ModelOptions sharded(std::shared_ptr<transport::Communicator> group) {
  model_loader::ModelOptions options;
  options.tensor_parallel_group = std::move(group);
  options.collective_timeout = 20s;
  return options;
}

// Logits of kPrompt at every position, then of two decode steps over a batch of two sequences
// (one of them the prompt's cache), as one tensor.
at::Tensor logits_of(const model_loader::ServableModel& model) {
  model_loader::KvCache a, b;
  std::vector<model_loader::ForwardSlice> prefill{{&a, static_cast<std::int64_t>(kPrompt.size())}};
  at::Tensor all = model.forward(testing::long_tensor(kPrompt), prefill, true);
  std::vector<at::Tensor> out{all};
  for (std::int64_t step = 0; step < 2; ++step) {
    std::vector<model_loader::ForwardSlice> batch{{&a, 1}, {&b, 1 + step}};
    std::vector<std::int64_t> ids{11 + step, 40};
    if (step == 1) ids.push_back(41);
    out.push_back(model.forward(testing::long_tensor(ids), batch));
  }
  return at::cat(out, 0);
}

// The tiny configs of every architecture, and two layouts that stress the split: tied
// embeddings, and a single KV head (replicated on every rank).
std::vector<model_loader::ModelConfig> configs() {
  std::vector<model_loader::ModelConfig> out;
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3, architectures::kQwen3Moe, architectures::kMixtral}) {
    out.push_back(testing::tiny_config(arch));
  }
  auto tied = testing::tiny_config(architectures::kQwen2);
  tied.tie_word_embeddings = true;
  out.push_back(tied);
  auto one_kv_head = testing::tiny_config(architectures::kQwen3);
  one_kv_head.num_key_value_heads = 1;
  out.push_back(model_loader::ModelConfig::from_json(one_kv_head.to_json()));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensor_parallel)

BOOST_AUTO_TEST_CASE(float32_logits_at_tp_2_equal_tp_1_on_every_architecture) {
  for (const auto& config : configs()) {
    CheckpointDir ckpt(config, 31);
    const at::Tensor expected = logits_of(*ckpt.load());
    const auto expected_sums = ckpt.load()->checkpoint_checksums();
    std::vector<at::Tensor> got(2);
    std::vector<std::map<std::string, std::string>> sums(2);
    testing::on_ranks(2, [&](int rank, auto group) {
      auto model = ckpt.load(sharded(group));
      got[rank] = logits_of(*model);
      sums[rank] = model->checkpoint_checksums();
    });
    const std::string name = config.architecture_name() +
                             (config.tie_word_embeddings ? " (tied)" : "") +
                             (config.num_key_value_heads == 1 ? " (one KV head)" : "");
    for (int rank = 0; rank < 2; ++rank) {
      // Only the row-parallel sums run in another order: float32 rounding, nothing more.
      BOOST_TEST(max_abs_diff(got[rank], expected) < 1e-4, name << " rank " << rank);
      // The ranks put each sharded tensor back together: the whole checkpoint's bytes.
      BOOST_TEST((sums[rank] == expected_sums), name << " rank " << rank);
    }
  }
}

BOOST_AUTO_TEST_CASE(four_ranks_share_two_kv_heads_and_a_bfloat16_runtime_tracks_tp_1) {
  auto config = testing::tiny_config(architectures::kQwen3Moe);
  CheckpointDir ckpt(config, 32);
  model_loader::ModelOptions bf16;
  bf16.dtype = protocol::DType::kBFloat16;
  const at::Tensor expected = logits_of(*ckpt.load(bf16));
  std::vector<at::Tensor> got(4);
  testing::on_ranks(4, [&](int rank, auto group) {
    auto options = sharded(group);
    options.dtype = protocol::DType::kBFloat16;
    got[rank] = logits_of(*ckpt.load(options));
  });
  const double scale = at::abs(expected).max().item<double>();
  for (int rank = 0; rank < 4; ++rank) {
    BOOST_TEST(got[rank].equal(got[0]), "every rank returns the same logits");
    // Partial sums meet in float32 and are rounded once, as at tp = 1; what differs is where
    // bfloat16 rounds the MoE's partial products.
    BOOST_TEST(max_abs_diff(got[rank], expected) < 0.03 * scale, "rank " << rank);
  }
}

BOOST_AUTO_TEST_CASE(a_weight_update_and_sparse_patches_land_on_each_rank_s_slice) {
  for (auto arch : {architectures::kLlama, architectures::kMixtral}) {
    auto config = testing::tiny_config(arch);
    CheckpointDir old_ckpt(config, 33), new_ckpt(config, 34);
    const auto update = new_ckpt.tensors();
    // Patches address whole tensors; each rank applies what falls in its slice.
    const std::vector<std::string> patched = {
        "model.embed_tokens.weight", "model.layers.0.self_attn.k_proj.weight",
        "model.layers.1.self_attn.o_proj.weight",
        arch == architectures::kMixtral ? "model.layers.0.block_sparse_moe.experts.1.w2.weight"
                                        : "model.layers.0.mlp.down_proj.weight"};
    std::vector<model_loader::WeightPatch> patches;
    for (const auto& name : patched) {
      const std::int64_t numel = new_ckpt.open().tensor(name).numel();
      at::Tensor indices = at::arange(0, numel, 7, at::TensorOptions().dtype(at::kInt));
      patches.push_back({name, indices, at::arange(indices.numel()).to(at::kFloat) * 0.01});
    }
    auto reference = old_ckpt.load();
    reference->start_reload();
    reference->load_weights(update);
    reference->finish_reload();
    const at::Tensor updated = logits_of(*reference);
    reference->apply_patches(patches);
    const at::Tensor expected = logits_of(*reference);
    const auto expected_sums = reference->checkpoint_checksums();

    std::vector<at::Tensor> after_update(2), after_patches(2);
    std::vector<std::map<std::string, std::string>> sums(2);
    testing::on_ranks(2, [&](int rank, auto group) {
      auto model = old_ckpt.load(sharded(group));
      model->start_reload();
      model->load_weights(update);  // whole tensors: each rank keeps its slice
      model->finish_reload();
      after_update[rank] = logits_of(*model);
      model->apply_patches(patches);
      after_patches[rank] = logits_of(*model);
      sums[rank] = model->checkpoint_checksums();
    });
    for (int rank = 0; rank < 2; ++rank) {
      BOOST_TEST(max_abs_diff(after_update[rank], updated) < 1e-4, arch << " rank " << rank);
      BOOST_TEST(max_abs_diff(after_patches[rank], expected) < 1e-4, arch << " rank " << rank);
      BOOST_TEST((sums[rank] == expected_sums), arch << " rank " << rank);
    }
  }
}

BOOST_AUTO_TEST_CASE(experts_spread_whole_over_the_ranks_track_tp_1_and_take_updates) {
  // vLLM's expert parallelism: each rank holds whole experts (5 experts: ranks hold 3 and 2),
  // the width of none of them split (moe_intermediate_size 25 does not split 2 ways).
  for (auto arch : {architectures::kQwen3Moe, architectures::kMixtral}) {
    auto config = testing::tiny_config(arch);
    config.num_experts = 5;
    config.moe_intermediate_size = 25;
    config = model_loader::ModelConfig::from_json(config.to_json());
    CheckpointDir old_ckpt(config, 35), new_ckpt(config, 36);
    const std::string block = arch == architectures::kMixtral
                                  ? "model.layers.0.block_sparse_moe.experts."
                                  : "model.layers.0.mlp.experts.";
    const std::string down = arch == architectures::kMixtral ? "w2" : "down_proj";
    // One patch on an expert of rank 0 and one on an expert of rank 1.
    std::vector<model_loader::WeightPatch> patches;
    for (const std::string expert : {"1", "4"}) {
      const std::string name = block + expert + "." + down + ".weight";
      const std::int64_t numel = new_ckpt.open().tensor(name).numel();
      at::Tensor indices = at::arange(0, numel, 3, at::TensorOptions().dtype(at::kInt));
      patches.push_back({name, indices, at::arange(indices.numel()).to(at::kFloat) * 0.01});
    }
    const at::Tensor before = logits_of(*old_ckpt.load());
    auto reference = old_ckpt.load();
    reference->start_reload();
    reference->load_weights(new_ckpt.tensors());
    reference->finish_reload();
    const at::Tensor updated = logits_of(*reference);
    reference->apply_patches(patches);
    const at::Tensor patched = logits_of(*reference);
    const auto expected_sums = reference->checkpoint_checksums();

    std::vector<at::Tensor> got_before(2), got_updated(2), got_patched(2);
    std::vector<std::int64_t> held(2);
    std::vector<std::map<std::string, std::string>> sums(2);
    testing::on_ranks(2, [&](int rank, auto group) {
      auto options = sharded(group);
      options.enable_expert_parallel = true;
      auto model = old_ckpt.load(options);
      held[rank] = static_cast<std::int64_t>(model->runtime_bytes());
      got_before[rank] = logits_of(*model);
      model->start_reload();
      model->load_weights(new_ckpt.tensors());  // every expert arrives; each rank keeps its own
      model->finish_reload();
      got_updated[rank] = logits_of(*model);
      model->apply_patches(patches);
      got_patched[rank] = logits_of(*model);
      sums[rank] = model->checkpoint_checksums();
    });
    BOOST_TEST(held[0] > held[1], "rank 0 holds 3 experts, rank 1 two");
    for (int rank = 0; rank < 2; ++rank) {
      BOOST_TEST(max_abs_diff(got_before[rank], before) < 1e-4, arch << " rank " << rank);
      BOOST_TEST(max_abs_diff(got_updated[rank], updated) < 1e-4, arch << " rank " << rank);
      BOOST_TEST(max_abs_diff(got_patched[rank], patched) < 1e-4, arch << " rank " << rank);
      BOOST_TEST((sums[rank] == expected_sums), arch << " rank " << rank);
    }
  }
  // A layer's experts must reach every rank.
  auto few = testing::tiny_config(architectures::kQwen3Moe);  // 4 experts
  BOOST_CHECK_NO_THROW(model_loader::check_tensor_parallel(few, 4, /*expert_parallel=*/true));
  few.num_attention_heads = 8;
  few.num_key_value_heads = 8;
  BOOST_CHECK_EXCEPTION(
      model_loader::check_tensor_parallel(few, 8, true), protocol::ValueError,
      [](const auto& e) { return std::string(e.what()).find("4 experts") != std::string::npos; });
}

BOOST_AUTO_TEST_CASE(a_config_that_does_not_split_is_refused_naming_the_dimension) {
  auto config = testing::tiny_config(architectures::kLlama);  // 4 heads, 2 KV heads, I = 48
  BOOST_CHECK_NO_THROW(model_loader::check_tensor_parallel(config, 4));
  BOOST_CHECK_EXCEPTION(
      model_loader::check_tensor_parallel(config, 3), protocol::ValueError, [](const auto& e) {
        return std::string(e.what()) ==
               "Total number of attention heads (4) must be divisible by tensor parallel size (3)";
      });
  config.intermediate_size = 50;
  BOOST_CHECK_EXCEPTION(
      model_loader::check_tensor_parallel(config, 4), protocol::ValueError,
      [](const auto& e) { return std::string(e.what()).starts_with("intermediate_size (50)"); });
  auto three_kv = testing::tiny_config(architectures::kLlama);
  three_kv.num_attention_heads = 6;
  three_kv.num_key_value_heads = 3;
  BOOST_CHECK_EXCEPTION(
      model_loader::check_tensor_parallel(three_kv, 2), protocol::ValueError, [](const auto& e) {
        return std::string(e.what()).find("key/value heads (3)") != std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(a_rank_that_does_not_step_fails_the_others_within_the_timeout) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 35);
  testing::on_ranks(2, [&](int rank, auto group) {
    auto options = sharded(group);
    options.collective_timeout = 1s;
    auto model = ckpt.load(options);
    if (rank == 1) {
      std::this_thread::sleep_for(3s);  // never steps; leaves once rank 0 has given up
      return;
    }
    auto start = std::chrono::steady_clock::now();
    BOOST_CHECK_THROW(testing::model_logits(*model, kPrompt), protocol::Error);
    BOOST_TEST((std::chrono::steady_clock::now() - start < 2900ms));
  });
}

BOOST_AUTO_TEST_SUITE_END()
