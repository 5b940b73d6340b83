#include "protocol/layerwise_groups.hpp"

#include <boost/test/unit_test.hpp>

using namespace hotswap::protocol;
using Groups = std::vector<std::vector<std::string>>;

namespace {
std::vector<std::string> llama_layer(int i) {
  std::string p = "model.layers." + std::to_string(i) + ".";
  return {p + "input_layernorm.weight",  p + "self_attn.q_proj.weight",
          p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight",
          p + "self_attn.o_proj.weight", p + "post_attention_layernorm.weight",
          p + "mlp.gate_proj.weight",    p + "mlp.up_proj.weight",
          p + "mlp.down_proj.weight"};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(layerwise_groups_rules)

BOOST_AUTO_TEST_CASE(stack_key_is_the_outermost_integer_segment) {
  auto key = stack_key("model.layers.3.mlp.experts.7.w1");
  BOOST_REQUIRE(key.has_value());
  BOOST_TEST(key->first == "model.layers");
  BOOST_TEST(key->second == 3u);
  BOOST_TEST(!stack_key("model.embed_tokens.weight").has_value());
  BOOST_TEST(!stack_key("lm_head.weight").has_value());
  auto leading = stack_key("0.weight");
  BOOST_REQUIRE(leading.has_value());
  BOOST_TEST(leading->first == "");
  BOOST_TEST(leading->second == 0u);
  // "3a" is not all digits, so it is not an index.
  BOOST_TEST(!stack_key("model.block3.3a.weight").has_value());
}

BOOST_AUTO_TEST_CASE(llama_names_split_into_pre_layers_post) {
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  for (int i = 0; i < 3; ++i) {
    auto layer = llama_layer(i);
    names.insert(names.end(), layer.begin(), layer.end());
  }
  names.push_back("model.norm.weight");
  names.push_back("lm_head.weight");

  Groups groups = layerwise_groups(names);
  BOOST_REQUIRE_EQUAL(groups.size(), 5u);
  BOOST_TEST(groups[0] == std::vector<std::string>{"model.embed_tokens.weight"});
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(groups[1 + i] == llama_layer(i));
  BOOST_TEST(groups[4] == (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
}

BOOST_AUTO_TEST_CASE(vision_language_model_stacks_keep_first_appearance_order_of_prefix) {
  std::vector<std::string> names = {
      "model.language_model.embed_tokens.weight",
      "visual.patch_embed.proj.weight",  // still before the first indexed name: pre
      "visual.blocks.1.attn.qkv.weight",
      "model.language_model.layers.0.self_attn.q_proj.weight",
      "visual.blocks.0.attn.qkv.weight",
      "model.language_model.layers.1.self_attn.q_proj.weight",
      "visual.merger.mlp.0.weight",  // indexed under its own prefix
      "model.language_model.norm.weight",
      "lm_head.weight",
  };
  Groups expected = {
      {"model.language_model.embed_tokens.weight", "visual.patch_embed.proj.weight"},
      {"visual.blocks.0.attn.qkv.weight"},
      {"visual.blocks.1.attn.qkv.weight"},
      {"model.language_model.layers.0.self_attn.q_proj.weight"},
      {"model.language_model.layers.1.self_attn.q_proj.weight"},
      {"visual.merger.mlp.0.weight"},
      {"model.language_model.norm.weight", "lm_head.weight"},
  };
  BOOST_TEST(layerwise_groups(names) == expected);
}

BOOST_AUTO_TEST_CASE(moe_experts_stay_inside_their_layer) {
  std::vector<std::string> names = {"model.embed_tokens.weight"};
  for (int layer = 0; layer < 2; ++layer) {
    std::string p = "model.layers." + std::to_string(layer) + ".";
    names.push_back(p + "mlp.gate.weight");
    for (int e = 0; e < 4; ++e) {
      for (const char* w : {"w1", "w2", "w3"}) {
        names.push_back(p + "mlp.experts." + std::to_string(e) + "." + w);
      }
    }
  }
  Groups groups = layerwise_groups(names);
  BOOST_REQUIRE_EQUAL(groups.size(), 3u);
  BOOST_TEST(groups[1].size() == 13u);
  BOOST_TEST(groups[2].size() == 13u);
  BOOST_TEST(groups[1].back() == "model.layers.0.mlp.experts.3.w3");
}

BOOST_AUTO_TEST_CASE(pipeline_parallel_post_block_first_still_lands_last) {
  // A pipeline-parallel export streams the last stage's output block before its layers.
  std::vector<std::string> names = {
      "model.embed_tokens.weight",
      "model.layers.0.mlp.up_proj.weight",
      "model.layers.1.mlp.up_proj.weight",
      "model.norm.weight",
      "lm_head.weight",
      "model.layers.3.mlp.up_proj.weight",
      "model.layers.2.mlp.up_proj.weight",
  };
  Groups expected = {
      {"model.embed_tokens.weight"},         {"model.layers.0.mlp.up_proj.weight"},
      {"model.layers.1.mlp.up_proj.weight"}, {"model.layers.2.mlp.up_proj.weight"},
      {"model.layers.3.mlp.up_proj.weight"}, {"model.norm.weight", "lm_head.weight"},
  };
  BOOST_TEST(layerwise_groups(names) == expected);
}

BOOST_AUTO_TEST_CASE(stacks_sort_by_ascending_index_whatever_the_arrival_order) {
  std::vector<std::string> names = {"h.10.w", "h.2.w", "h.2.b", "h.1.w", "h.10.b"};
  Groups expected = {{"h.1.w"}, {"h.2.w", "h.2.b"}, {"h.10.w", "h.10.b"}};
  BOOST_TEST(layerwise_groups(names) == expected);
}

BOOST_AUTO_TEST_CASE(names_without_any_index_form_one_pre_group) {
  Groups expected = {{"a.weight", "b.weight"}};
  BOOST_TEST(layerwise_groups({"a.weight", "b.weight"}) == expected);
  BOOST_TEST(layerwise_groups({}).empty());
}

BOOST_AUTO_TEST_SUITE_END()
