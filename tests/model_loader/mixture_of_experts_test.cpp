// Qwen3-MoE and Mixtral: their config.json, the fused expert layout vLLM keeps, and reloads
// that touch some experts only. Their logits are held against transformers in
// llama_model_test.cpp's golden suite.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/equal.h>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/generation.hpp"
#include "model_test_support.hpp"
#include "protocol/errors.hpp"
#include "transport/tensor_digest.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using model_loader::ModelConfig;
using model_loader::UpdateMode;
using nlohmann::json;
using testing::CheckpointDir;

namespace {

json moe_base(const std::string& arch) {
  return {{"architectures", {arch}}, {"hidden_size", 64},        {"intermediate_size", 96},
          {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 100},       {"num_experts_per_tok", 2}};
}

const std::vector<std::int64_t> kPrompt = {3, 17, 42, 5, 9, 61, 7, 20};

}  // namespace

BOOST_AUTO_TEST_SUITE(mixture_of_experts)

BOOST_AUTO_TEST_CASE(both_spellings_of_the_expert_count_are_read) {
  json v4 = moe_base("Qwen3MoeForCausalLM");
  v4["num_experts"] = 16;
  v4["moe_intermediate_size"] = 32;
  v4["mlp_only_layers"] = {0};
  auto qwen = ModelConfig::from_json(v4);
  BOOST_TEST(qwen.num_experts == 16);
  BOOST_TEST(qwen.moe_intermediate_size == 32);
  BOOST_TEST(!qwen.norm_topk_prob);  // transformers' default
  BOOST_TEST(qwen.qk_norm);
  BOOST_TEST(!qwen.is_moe_layer(0));
  BOOST_TEST(qwen.is_moe_layer(1));
  json v5 = v4;
  v5.erase("num_experts");
  v5["num_local_experts"] = 12;
  BOOST_TEST(ModelConfig::from_json(v5).num_experts == 12);

  json mixtral = moe_base("MixtralForCausalLM");
  mixtral["num_local_experts"] = 8;
  auto m = ModelConfig::from_json(mixtral);
  BOOST_TEST(m.moe_intermediate_size == 96);  // Mixtral's experts are intermediate_size wide
  BOOST_TEST(m.norm_topk_prob);
  BOOST_TEST(m.is_moe_layer(0));
  BOOST_TEST(m.is_moe_layer(1));
  // And back: what to_json writes reads as the same model.
  auto again = ModelConfig::from_json(m.to_json());
  BOOST_TEST(again.num_experts == 8);
  BOOST_TEST(again.router_weights_float32);
  BOOST_TEST(ModelConfig::from_json(qwen.to_json()).mlp_only_layers ==
             std::vector<std::int64_t>{0});
}

BOOST_AUTO_TEST_CASE(decoder_sparse_step_and_mlp_only_layers_pick_the_sparse_layers) {
  json config = moe_base("Qwen3MoeForCausalLM");
  config["num_hidden_layers"] = 6;
  config["decoder_sparse_step"] = 2;
  config["mlp_only_layers"] = {3};
  auto c = ModelConfig::from_json(config);
  std::vector<bool> sparse;
  for (int layer = 0; layer < 6; ++layer)
    sparse.push_back(c.is_moe_layer(layer));
  // Every second layer (1, 3, 5) as transformers counts, but layer 3 keeps a dense MLP.
  BOOST_TEST((sparse == std::vector<bool>{false, true, false, false, false, true}));
  // The layout follows: dense layers have gate_up_proj, sparse ones fused experts.
  auto mapping =
      model_loader::ArchitectureRegistry::builtin().find(c.architecture).weight_mapping(c, {});
  BOOST_TEST(mapping.find("model.layers.3.mlp.gate_proj.weight") != nullptr);
  BOOST_TEST(mapping.find("model.layers.5.mlp.experts.0.gate_proj.weight") != nullptr);
  BOOST_TEST(mapping.find("model.layers.5.mlp.gate_proj.weight") == nullptr);
}

BOOST_AUTO_TEST_CASE(impossible_expert_configs_are_refused_by_name) {
  json too_many = moe_base("MixtralForCausalLM");
  too_many["num_local_experts"] = 2;
  too_many["num_experts_per_tok"] = 3;
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(too_many), protocol::ValueError,
                          "num_experts_per_tok 3 is more than the 2 experts of a layer");
  json bad_layers = moe_base("Qwen3MoeForCausalLM");
  bad_layers["mlp_only_layers"] = {5};
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(bad_layers), protocol::ValueError,
                          "`mlp_only_layers` holds 5");
  json zero = moe_base("Qwen3MoeForCausalLM");
  zero["num_experts"] = 0;
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(zero), protocol::ValueError,
                          "`num_experts` must be a positive integer");
}

BOOST_AUTO_TEST_CASE(experts_are_fused_under_vllms_runtime_names) {
  for (auto arch : {architectures::kQwen3Moe, architectures::kMixtral}) {
    BOOST_TEST_CONTEXT(arch) {
      CheckpointDir ckpt(testing::tiny_config(arch), 50);
      auto model = ckpt.load();
      const auto& c = model->config();
      const std::string block = arch == architectures::kMixtral ? "block_sparse_moe" : "mlp";
      auto runtime = model->runtime_checksums("");
      for (const char* fused : {"experts.w13_weight", "experts.w2_weight", "gate.weight"}) {
        BOOST_TEST(runtime.count("model.layers.0." + block + "." + fused) == 1u, fused);
      }
      // The per-expert checkpoint tensors unfuse back to their exact bytes.
      auto checkpoint = model->checkpoint_checksums();
      auto file = ckpt.open();
      BOOST_TEST(checkpoint.size() == file.names().size());
      for (const auto& name : file.names()) {
        BOOST_TEST(checkpoint.at(name) == transport::sha256_hex(file.tensor(name)), name);
      }
      const std::string down = arch == architectures::kMixtral ? "w2" : "down_proj";
      BOOST_TEST(checkpoint.count("model.layers.0." + block + ".experts." +
                                  std::to_string(c.num_experts - 1) + "." + down + ".weight") ==
                 1u);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_update_of_one_expert_changes_that_expert_only) {
  for (auto mode : {UpdateMode::kStaged, UpdateMode::kInplace}) {
    BOOST_TEST_CONTEXT((mode == UpdateMode::kStaged ? "staged" : "inplace")) {
      auto config = testing::tiny_config(architectures::kQwen3Moe);
      CheckpointDir old_ckpt(config, 60), new_ckpt(config, 61);
      model_loader::ModelOptions options;
      options.update_mode = mode;
      auto model = old_ckpt.load(options);
      const std::string expert = "model.layers.0.mlp.experts.2.";
      std::vector<model_loader::NamedTensor> update;
      for (const auto& [name, t] : new_ckpt.tensors()) {
        if (name.starts_with(expert) || name == "model.layers.0.mlp.gate.weight") {
          update.emplace_back(name, t);
        }
      }
      BOOST_TEST(update.size() == 4u);  // gate, up, down of expert 2, and the router
      model->start_reload();
      model->load_weights(update);
      model->finish_reload();
      auto sums = model->checkpoint_checksums();
      auto fresh = new_ckpt.open(), old = old_ckpt.open();
      for (const auto& name : old.names()) {
        const bool updated = name.starts_with(expert) || name == "model.layers.0.mlp.gate.weight";
        const auto& source = updated ? fresh : old;
        BOOST_TEST(sums.at(name) == transport::sha256_hex(source.tensor(name)), name);
      }
      BOOST_TEST(!model->is_dirty());
    }
  }
}

BOOST_AUTO_TEST_CASE(under_int8_one_expert_updates_alone_and_the_rest_keeps_its_values) {
  // Experts stay in the runtime dtype under int8, so a round that names one expert keeps the
  // others exactly; the layer's quantized attention, untouched, keeps its int8 values too.
  auto config = testing::tiny_config(architectures::kQwen3Moe);
  CheckpointDir old_ckpt(config, 90), new_ckpt(config, 91);
  model_loader::ModelOptions options;
  options.quantize_int8 = true;
  auto model = old_ckpt.load(options);
  const auto before = model->runtime_checksums("");
  const std::string expert = "model.layers.0.mlp.experts.1.";
  std::vector<model_loader::NamedTensor> update;
  for (const auto& [name, t] : new_ckpt.tensors()) {
    if (name.starts_with(expert)) update.emplace_back(name, t);
  }
  model->start_reload();
  model->load_weights(update);
  model->finish_reload();
  const auto after = model->runtime_checksums("");
  for (const auto& [name, digest] : before) {
    BOOST_TEST((after.at(name) == digest) == (name != "model.layers.0.mlp.experts.w13_weight" &&
                                              name != "model.layers.0.mlp.experts.w2_weight"),
               name);
  }
}

BOOST_AUTO_TEST_CASE(a_failed_staged_update_mid_moe_layer_keeps_every_expert) {
  auto config = testing::tiny_config(architectures::kMixtral);
  CheckpointDir old_ckpt(config, 70), new_ckpt(config, 71);
  auto model = old_ckpt.load();
  const auto before = model->runtime_checksums("");
  model->start_reload();
  auto tensors = new_ckpt.tensors();
  model->load_weights({tensors.begin(), tensors.begin() + 6});
  HOTSWAP_CHECK_THROW_MSG(
      model->load_weights(
          {{"model.layers.0.block_sparse_moe.experts.1.w1.weight", tensors.front().second}}),
      protocol::ValueError, "has shape");
  model->abort_reload();
  BOOST_TEST((model->runtime_checksums("") == before));
}

BOOST_AUTO_TEST_CASE(generation_batches_tokens_through_their_experts_and_follows_a_reload) {
  for (auto arch : {architectures::kQwen3Moe, architectures::kMixtral}) {
    BOOST_TEST_CONTEXT(arch) {
      auto config = testing::tiny_config(arch);
      CheckpointDir old_ckpt(config, 80), new_ckpt(config, 81);
      auto model = old_ckpt.load();
      model_loader::SamplingParams greedy;
      greedy.temperature = 0;
      greedy.max_tokens = 6;
      auto before = model_loader::generate(*model, {kPrompt, {5, 6}}, greedy);
      BOOST_TEST(before.size() == 2u);
      BOOST_TEST(before[0].token_ids.size() == 6u);
      // Batched and alone give the same tokens: routing is per token.
      BOOST_TEST(model_loader::generate(*model, {kPrompt}, greedy)[0].token_ids ==
                 before[0].token_ids);
      model->start_reload();
      model->load_weights(new_ckpt.tensors());
      model->finish_reload();
      // A complete reload serves exactly what a fresh load of the new checkpoint serves.
      BOOST_TEST(model_loader::generate(*model, {kPrompt}, greedy)[0].token_ids ==
                 model_loader::generate(*new_ckpt.load(), {kPrompt}, greedy)[0].token_ids);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
