#include "model_loader/architecture_registry.hpp"

#include <boost/test/unit_test.hpp>

#include <fstream>

#include "model_test_support.hpp"
#include "protocol/errors.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using model_loader::Architecture;
using model_loader::ArchitectureRegistry;

namespace {

// An architecture whose create only counts its calls.
Architecture probe(const std::string& name, const std::string& model_type, int* created) {
  return Architecture{
      name,
      model_type,
      [](const nlohmann::json&, model_loader::ModelConfig&) {},
      [](const model_loader::ModelConfig&, nlohmann::json&) {},
      [](const model_loader::ModelConfig&, model_loader::TensorParallelRank) {
        return model_loader::WeightMapping(1);
      },
      [created](const model_loader::ModelConfig&, const model_loader::ModelOptions&) {
        ++*created;
        return std::shared_ptr<model_loader::ServableModel>();
      }};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(architecture_registry)

BOOST_AUTO_TEST_CASE(the_builtin_registry_serves_the_llama_family_by_both_names) {
  const auto& registry = ArchitectureRegistry::builtin();
  BOOST_TEST(
      (registry.names() == std::vector<std::string>{"LlamaForCausalLM", "MistralForCausalLM",
                                                    "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                                    "Qwen3MoeForCausalLM", "MixtralForCausalLM"}));
  BOOST_TEST(registry.find_by_model_type("qwen3").name == std::string(architectures::kQwen3));
  BOOST_TEST(registry.find(architectures::kMistral).model_type == "mistral");
}

BOOST_AUTO_TEST_CASE(an_unknown_architecture_is_refused_naming_it_and_what_is_served) {
  const auto& registry = ArchitectureRegistry::builtin();
  HOTSWAP_CHECK_THROW_MSG(registry.find("GPT2LMHeadModel"), protocol::ValueError,
                          "architecture 'GPT2LMHeadModel' is not supported (hotswap serves "
                          "LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                          "Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM)");
  HOTSWAP_CHECK_THROW_MSG(registry.find_by_model_type("gpt2"), protocol::ValueError,
                          "unknown architecture 'gpt2' (expected one of llama, mistral, qwen2, "
                          "qwen3, qwen3_moe, mixtral)");
}

BOOST_AUTO_TEST_CASE(a_name_or_model_type_is_registered_once) {
  int created = 0;
  ArchitectureRegistry registry;
  registry.add(probe("ProbeForCausalLM", "probe", &created));
  HOTSWAP_CHECK_THROW_MSG(registry.add(probe("ProbeForCausalLM", "other", &created)),
                          protocol::ValueError,
                          "'ProbeForCausalLM' (model_type 'other') is already");
  HOTSWAP_CHECK_THROW_MSG(registry.add(probe("OtherForCausalLM", "probe", &created)),
                          protocol::ValueError, "already registered");
  BOOST_TEST(registry.names().size() == 1u);
  registry.find("ProbeForCausalLM").create({}, {});
  BOOST_TEST(created == 1);
}

BOOST_AUTO_TEST_CASE(load_model_builds_the_architecture_config_json_names) {
  for (auto arch : {architectures::kLlama, architectures::kMistral, architectures::kQwen2,
                    architectures::kQwen3, architectures::kQwen3Moe, architectures::kMixtral}) {
    BOOST_TEST_CONTEXT(arch) {
      testing::CheckpointDir ckpt(testing::tiny_config(arch), 40);
      std::shared_ptr<model_loader::ServableModel> model = ckpt.load();
      BOOST_TEST(model->config().architecture == std::string(arch));
      BOOST_TEST(model->checkpoint_checksums().size() == ckpt.open().names().size());
    }
  }
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_an_unserved_architecture_is_refused_before_any_weight_loads) {
  testing::CheckpointDir ckpt(testing::tiny_config(architectures::kLlama), 41);
  auto config = ckpt.config.to_json();
  config["architectures"] = {"DeepseekV3ForCausalLM"};
  std::ofstream(ckpt.dir.path / "config.json") << config.dump();
  HOTSWAP_CHECK_THROW_MSG(model_loader::load_model(ckpt.dir.path), protocol::ValueError,
                          "config.json: architecture 'DeepseekV3ForCausalLM' is not supported");
}

BOOST_AUTO_TEST_SUITE_END()
