#include "model_loader/architectures/llama_model.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/abs.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>

#include <fstream>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "model_test_support.hpp"
#include "protocol/errors.hpp"
#include "transport/tensor_digest.hpp"
#include "transport/torch_dtype.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using testing::CheckpointDir;
using testing::max_abs_diff;

namespace {

const std::vector<std::int64_t> kPrompt = {3, 17, 42, 5, 9, 61, 7, 20, 1, 33};

}  // namespace

BOOST_AUTO_TEST_SUITE(llama_model)

BOOST_AUTO_TEST_CASE(fused_runtime_model_matches_the_reference_forward_for_each_architecture) {
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3}) {
    CheckpointDir ckpt(testing::tiny_config(arch), 11);
    auto model = ckpt.load();
    at::Tensor ours = testing::model_logits(*model, kPrompt);
    at::Tensor reference = testing::reference_logits(ckpt.open(), ckpt.config, kPrompt);
    BOOST_TEST(max_abs_diff(ours, reference) < 1e-4, ckpt.config.architecture_name());
  }
}

BOOST_AUTO_TEST_CASE(tied_embeddings_have_no_lm_head_and_reuse_the_embedding) {
  auto config = testing::tiny_config(architectures::kQwen2);
  config.tie_word_embeddings = true;
  CheckpointDir ckpt(config, 12);
  BOOST_TEST(!ckpt.open().contains("lm_head.weight"));
  auto model = ckpt.load();
  BOOST_TEST(model->runtime_checksums("").count("lm_head.weight") == 0u);
  BOOST_TEST(max_abs_diff(testing::model_logits(*model, kPrompt),
                          testing::reference_logits(ckpt.open(), config, kPrompt)) < 1e-4);
  // A checkpoint that carries lm_head anyway loads: the alias is skipped, as vLLM does.
  model->start_reload();
  model->load_weights({{"lm_head.weight", at::zeros({config.vocab_size, config.hidden_size})},
                       {"model.layers.0.self_attn.rotary_emb.inv_freq", at::zeros({4})}});
  model->finish_reload();
}

BOOST_AUTO_TEST_CASE(fused_rows_land_at_their_offsets) {
  // Unfusing the runtime storage gives back every checkpoint tensor bit for bit.
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3}) {
    CheckpointDir each(testing::tiny_config(arch), 13);
    auto digests = each.load()->checkpoint_checksums();
    auto file = each.open();
    BOOST_TEST(digests.size() == file.names().size());
    for (const auto& name : file.names()) {
      BOOST_TEST(digests.at(name) == transport::sha256_hex(file.tensor(name)), name);
    }
  }
  CheckpointDir ckpt(testing::tiny_config(architectures::kQwen2), 13);
  auto model = ckpt.load();
  // The runtime view has the fused parameters, keyed as vLLM's checker keys them.
  auto runtime = model->runtime_checksums("dp0:pp0:pcp0:tp0:");
  BOOST_TEST(runtime.count("dp0:pp0:pcp0:tp0:model.layers.1.self_attn.qkv_proj.weight") == 1u);
  BOOST_TEST(runtime.count("dp0:pp0:pcp0:tp0:model.layers.1.self_attn.qkv_proj.bias") == 1u);
  BOOST_TEST(runtime.count("dp0:pp0:pcp0:tp0:model.layers.1.mlp.gate_up_proj.weight") == 1u);
  BOOST_TEST(runtime.count("dp0:pp0:pcp0:tp0:model.layers.1.self_attn.q_proj.weight") == 0u);
}

BOOST_AUTO_TEST_CASE(kv_cache_decoding_equals_full_recomputation) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 14);
  auto model = ckpt.load();
  at::Tensor full = testing::model_logits(*model, kPrompt);
  model_loader::KvCache cache;
  std::vector<model_loader::ForwardSlice> prefill{{&cache, 6}};
  std::vector<std::int64_t> head(kPrompt.begin(), kPrompt.begin() + 6);
  at::Tensor first = model->forward(testing::long_tensor(head), prefill);
  BOOST_TEST(max_abs_diff(first[0], full[5]) < 1e-4);
  for (std::size_t i = 6; i < kPrompt.size(); ++i) {
    std::vector<model_loader::ForwardSlice> decode{{&cache, 1}};
    at::Tensor next = model->forward(testing::long_tensor({kPrompt[i]}), decode);
    BOOST_TEST(max_abs_diff(next[0], full[static_cast<std::int64_t>(i)]) < 1e-4);
  }
  BOOST_TEST(cache.length == static_cast<std::int64_t>(kPrompt.size()));
}

BOOST_AUTO_TEST_CASE(a_batched_step_equals_each_sequence_alone) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kQwen3), 15);
  auto model = ckpt.load();
  std::vector<std::int64_t> a(kPrompt.begin(), kPrompt.begin() + 7), b = {5, 4, 3};
  model_loader::KvCache ca, cb;
  std::vector<model_loader::ForwardSlice> slices{{&ca, 7}, {&cb, 3}};
  std::vector<std::int64_t> both = a;
  both.insert(both.end(), b.begin(), b.end());
  at::Tensor batched = model->forward(testing::long_tensor(both), slices);
  BOOST_TEST(max_abs_diff(batched[0], testing::model_logits(*model, a)[6]) < 1e-4);
  BOOST_TEST(max_abs_diff(batched[1], testing::model_logits(*model, b)[2]) < 1e-4);
}

BOOST_AUTO_TEST_CASE(load_rejects_unknown_names_and_wrong_shapes_before_writing_anything) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 16);
  auto model = ckpt.load();
  auto before = model->runtime_checksums("");
  auto fresh = at::zeros({16, 32});  // k_proj: 2 kv heads × head_dim 8
  model->start_reload();
  HOTSWAP_CHECK_THROW_MSG(model->load_weights({{"model.layers.0.self_attn.k_proj.weight", fresh},
                                               {"model.layers.0.self_attn.kv_proj.weight", fresh}}),
                          protocol::ValueError,
                          "unknown checkpoint tensor 'model.layers.0.self_attn.kv_proj.weight'");
  HOTSWAP_CHECK_THROW_MSG(
      model->load_weights({{"model.layers.0.self_attn.k_proj.weight", fresh},
                           {"model.layers.0.self_attn.v_proj.weight", at::zeros({16, 31})}}),
      protocol::ValueError,
      "checkpoint tensor 'model.layers.0.self_attn.v_proj.weight' has shape [16, 31] but the "
      "model's is [16, 32]");
  model->finish_reload();
  BOOST_TEST((model->runtime_checksums("") == before));  // the valid first tensor never landed
}

BOOST_AUTO_TEST_CASE(a_checkpoint_missing_a_tensor_does_not_load) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 17);
  auto tensors = ckpt.tensors();
  std::vector<std::pair<std::string, at::Tensor>> kept;
  for (const auto& [name, t] : tensors) {
    if (name != "model.layers.1.mlp.up_proj.weight") kept.emplace_back(name, t);
  }
  testing::TempDir dir;
  std::filesystem::copy_file(ckpt.dir.path / "config.json", dir.path / "config.json");
  model_loader::save_safetensors((dir.path / "model.safetensors").string(), kept);
  HOTSWAP_CHECK_THROW_MSG(model_loader::load_model(dir.path), protocol::ValueError,
                          "the checkpoint is missing 1 tensors: model.layers.1.mlp.up_proj.weight");
}

BOOST_AUTO_TEST_CASE(int8_logits_stay_close_to_float32) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 18);
  model_loader::ModelOptions int8;
  int8.quantize_int8 = true;
  at::Tensor exact = testing::model_logits(*ckpt.load(), kPrompt);
  at::Tensor quantized = testing::model_logits(*ckpt.load(int8), kPrompt);
  // Stated tolerance: every logit within 5% of the largest logit magnitude.
  double scale = at::abs(exact).max().item<double>();
  BOOST_TEST_MESSAGE("int8 max |Δlogit| = " << max_abs_diff(exact, quantized) << " of " << scale);
  BOOST_TEST(max_abs_diff(exact, quantized) < 0.05 * scale);
  HOTSWAP_CHECK_THROW_MSG(ckpt.load(int8)->checkpoint_checksums(), protocol::ValueError,
                          "int8-quantized (lossy)");
  auto runtime = ckpt.load(int8)->runtime_checksums("");
  BOOST_TEST(runtime.count("model.layers.0.mlp.down_proj.weight_scale") == 1u);
}

BOOST_AUTO_TEST_CASE(an_integer_runtime_dtype_is_refused) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 20);
  model_loader::ModelOptions options;
  options.dtype = protocol::DType::kInt8;
  HOTSWAP_CHECK_THROW_MSG(ckpt.load(options), protocol::ValueError,
                          "runtime dtype int8 is not supported");
}

BOOST_AUTO_TEST_CASE(bfloat16_and_float16_runtimes_track_float32) {
  CheckpointDir ckpt(testing::tiny_config(architectures::kMistral), 19);
  at::Tensor exact = testing::model_logits(*ckpt.load(), kPrompt);
  for (auto dtype : {protocol::DType::kBFloat16, protocol::DType::kFloat16}) {
    model_loader::ModelOptions options;
    options.dtype = dtype;
    auto model = ckpt.load(options);
    BOOST_TEST((model->dtype() == transport::to_scalar_type(dtype)));
    double scale = at::abs(exact).max().item<double>();
    BOOST_TEST(max_abs_diff(exact, testing::model_logits(*model, kPrompt)) < 0.05 * scale);
  }
}

// Every tensor a forward step makes (rotary tables, masks, caches, indices) must live on the
// model's device: libtorch refuses to mix devices in one op, so a model built on the meta device
// (shapes without storage) runs a forward only if nothing in it falls back to the CPU. On a GPU
// the same slip fails the first forward of a worker on cuda:N.
BOOST_AUTO_TEST_CASE(every_tensor_a_forward_makes_follows_the_models_device) {
  const c10::Device meta(c10::kMeta);
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3}) {
    for (auto dtype : {protocol::DType::kFloat32, protocol::DType::kBFloat16}) {
      CheckpointDir ckpt(testing::tiny_config(arch), 21);
      model_loader::ModelOptions options;
      options.device = meta;
      options.dtype = dtype;
      auto model = ckpt.load(options);
      BOOST_TEST((model->device() == meta));
      model_loader::KvCache a, b;
      std::vector<model_loader::ForwardSlice> prefill{{&a, 5}, {&b, 3}};
      at::Tensor logits = model->forward(testing::long_tensor({1, 2, 3, 4, 5, 6, 7, 8}), prefill);
      BOOST_TEST((logits.device() == meta), ckpt.config.architecture_name());
      BOOST_TEST((logits.sizes() == c10::IntArrayRef{2, ckpt.config.vocab_size}));
      std::vector<model_loader::ForwardSlice> decode{{&a, 1}, {&b, 2}};
      logits = model->forward(testing::long_tensor({9, 10, 11}), decode, /*all_positions=*/true);
      BOOST_TEST((logits.device() == meta));
      BOOST_TEST((model->kv_pool()->keys(0).device() == meta));
      BOOST_TEST(a.length == 6);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// Held against transformers itself: golden vectors made by tests/golden/make_golden.py.
BOOST_AUTO_TEST_SUITE(transformers_golden)

BOOST_AUTO_TEST_CASE(logits_and_greedy_continuations_match_transformers) {
  const std::string root = std::string(HOTSWAP_GOLDEN_DIR) + "/model_loader";
  int fixtures = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root)) {
    auto golden = nlohmann::json::parse(std::ifstream(entry.path() / "golden.json"));
    const bool bf16 = golden["dtype"] == "bfloat16";
    auto model = model_loader::load_model(entry.path());
    auto prompt = golden["prompt"].get<std::vector<std::int64_t>>();
    at::Tensor logits = testing::model_logits(*model, prompt);
    std::vector<at::Tensor> rows;
    for (const auto& row : golden["logits"])
      rows.push_back(at::tensor(row.get<std::vector<float>>()));
    at::Tensor expected = at::stack(rows);
    const double tolerance = bf16 ? 0.25 : 2e-4;  // bfloat16 keeps 8 bits of mantissa
    BOOST_TEST(max_abs_diff(logits, expected) < tolerance,
               entry.path().filename().string() << " max |Δ| " << max_abs_diff(logits, expected));

    model_loader::SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = static_cast<std::int64_t>(golden["greedy"].size());
    auto result = model_loader::generate(*model, {prompt}, greedy).at(0);
    for (std::size_t i = 0; i < golden["greedy"].size(); ++i) {
      const auto& step = golden["greedy"][i];
      // Past a near-tie in the reference, rounding may legitimately pick the other token.
      if (bf16 && step["margin"].get<double>() < 2 * tolerance) break;
      BOOST_TEST(result.token_ids[i] == step["token"].get<std::int64_t>(),
                 entry.path().filename().string() << " step " << i);
      if (!bf16) BOOST_TEST(std::abs(result.logprobs[i] - step["logprob"].get<double>()) < 1e-3);
    }
    ++fixtures;
  }
  BOOST_TEST(fixtures == 12);
}

BOOST_AUTO_TEST_SUITE_END()
