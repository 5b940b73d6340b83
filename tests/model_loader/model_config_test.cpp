#include "model_loader/model_config.hpp"

#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <future>
#include <limits>

#include "model_loader/architectures/llama_model.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using model_loader::ModelConfig;
using nlohmann::json;

namespace {
json base(const std::string& arch) {
  return {{"architectures", {arch}}, {"hidden_size", 64},        {"intermediate_size", 128},
          {"num_hidden_layers", 2},  {"num_attention_heads", 4}, {"num_key_value_heads", 2},
          {"vocab_size", 100},       {"rms_norm_eps", 1e-5},     {"torch_dtype", "bfloat16"}};
}
}  // namespace

BOOST_AUTO_TEST_SUITE(model_config)

BOOST_AUTO_TEST_CASE(each_architecture_sets_the_fields_that_change_the_math) {
  auto llama = ModelConfig::from_json(base("LlamaForCausalLM"));
  BOOST_TEST((llama.architecture == architectures::kLlama));
  BOOST_TEST(llama.head_dim == 16);
  BOOST_TEST(!llama.qkv_bias);
  BOOST_TEST((llama.torch_dtype == protocol::DType::kBFloat16));
  auto qwen2 = ModelConfig::from_json(base("Qwen2ForCausalLM"));
  BOOST_TEST(qwen2.qkv_bias);
  BOOST_TEST(!qwen2.o_proj_bias);
  json q3 = base("Qwen3ForCausalLM");
  q3["head_dim"] = 128;
  auto qwen3 = ModelConfig::from_json(q3);
  BOOST_TEST(qwen3.qk_norm);
  BOOST_TEST(qwen3.head_dim == 128);
  BOOST_TEST(qwen3.q_size() == 512);
  json mistral = base("MistralForCausalLM");
  mistral["sliding_window"] = 4096;
  BOOST_TEST(*ModelConfig::from_json(mistral).sliding_window == 4096);
  json biased = base("LlamaForCausalLM");
  biased["attention_bias"] = true;
  BOOST_TEST(ModelConfig::from_json(biased).o_proj_bias);
}

BOOST_AUTO_TEST_CASE(both_transformers_spellings_of_rope_and_dtype_are_read) {
  json v4 = base("LlamaForCausalLM");
  v4["rope_theta"] = 500000.0;
  v4["rope_scaling"] = {{"type", "llama3"},
                        {"factor", 32.0},
                        {"low_freq_factor", 1.0},
                        {"high_freq_factor", 4.0},
                        {"original_max_position_embeddings", 8192}};
  auto a = ModelConfig::from_json(v4);
  json v5 = base("LlamaForCausalLM");
  v5.erase("torch_dtype");
  v5["dtype"] = "bfloat16";
  v5["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                           {"factor", 32.0},          {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  auto b = ModelConfig::from_json(v5);
  for (const auto* c : {&a, &b}) {
    BOOST_TEST(c->rope_theta == 500000.0);
    BOOST_REQUIRE(c->rope_scaling.has_value());
    BOOST_TEST(c->rope_scaling->factor == 32.0);
    BOOST_TEST((c->torch_dtype == protocol::DType::kBFloat16));
  }
  json plain = base("LlamaForCausalLM");
  plain["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  BOOST_TEST(!ModelConfig::from_json(plain).rope_scaling.has_value());
  BOOST_TEST(ModelConfig::from_json(plain).rope_theta == 1e6);
}

BOOST_AUTO_TEST_CASE(unsupported_architectures_and_values_are_named) {
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(base("GPT2LMHeadModel")), protocol::ValueError,
                          "architecture 'GPT2LMHeadModel' is not supported");
  json c = base("LlamaForCausalLM");
  c["hidden_act"] = "gelu";
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError,
                          "hidden_act 'gelu' is not supported");
  c = base("LlamaForCausalLM");
  c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError,
                          "rope type 'yarn' is not supported");
  c = base("LlamaForCausalLM");
  c["num_key_value_heads"] = 3;
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError,
                          "num_attention_heads 4 is not a multiple of num_key_value_heads 3");
  c = base("LlamaForCausalLM");
  c.erase("vocab_size");
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError,
                          "config.json: `vocab_size` is required");
  c = base("Qwen2ForCausalLM");
  c["use_sliding_window"] = true;
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError,
                          "use_sliding_window=true is not supported");
  c = base("LlamaForCausalLM");
  c["torch_dtype"] = "int8";
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError,
                          "dtype 'int8' is not supported");
  c = base("LlamaForCausalLM");
  c["mlp_bias"] = true;
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(c), protocol::ValueError, "mlp_bias=true");
}

BOOST_AUTO_TEST_CASE(non_positive_non_finite_and_absurd_values_are_refused_by_name) {
  struct Case {
    const char* key;
    json value;
    const char* needle;
  };
  const Case cases[] = {
      {"rope_theta", -1, "`rope_theta` must be a positive finite number"},
      {"rope_theta", 0, "`rope_theta` must be a positive finite number"},
      {"rope_theta", std::numeric_limits<double>::infinity(),
       "`rope_theta` must be a positive finite number"},
      {"rope_theta", "10000", "`rope_theta` must be a positive finite number"},
      {"rms_norm_eps", 0.0, "`rms_norm_eps` must be a positive finite number"},
      {"hidden_size", 0, "`hidden_size` must be a positive integer"},
      {"hidden_size", -64, "`hidden_size` must be a positive integer"},
      {"hidden_size", 64.5, "`hidden_size` must be a positive integer"},
      {"vocab_size", 1ll << 40,
       "`vocab_size` is 1099511627776, beyond any model hotswap can serve"},
      {"num_hidden_layers", 1000000000, "`num_hidden_layers` is 1000000000, beyond any model"},
      {"max_position_embeddings", 1ull << 63, "`max_position_embeddings` must be a positive"},
      {"hidden_act", 5, "`hidden_act` must be a string"},
  };
  for (const auto& c : cases) {
    json config = base("LlamaForCausalLM");
    config[c.key] = c.value;
    HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(config), protocol::ValueError, c.needle);
  }
  json rope = base("LlamaForCausalLM");
  rope["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 0}};
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(rope), protocol::ValueError,
                          "`factor` must be a positive finite number");
  rope["rope_scaling"] = {{"rope_type", 3}};
  HOTSWAP_CHECK_THROW_MSG(ModelConfig::from_json(rope), protocol::ValueError,
                          "`rope_scaling.rope_type` must be a string");
}

BOOST_AUTO_TEST_CASE(a_model_too_large_for_the_machine_is_refused_before_allocating) {
  json config = base("LlamaForCausalLM");
  config["vocab_size"] = 16000000;
  config["hidden_size"] = 65536;
  config["num_attention_heads"] = 64;
  config["num_key_value_heads"] = 64;
  HOTSWAP_CHECK_THROW_MSG(model_loader::LlamaModel(ModelConfig::from_json(config), {}),
                          protocol::ValueError, "GB of memory; check its sizes");
}

BOOST_AUTO_TEST_CASE(config_json_must_be_a_regular_file) {
  testing::TempDir dir;
  BOOST_REQUIRE(::mkfifo((dir.path / "config.json").c_str(), 0600) == 0);
  auto load = std::async(std::launch::async, [&] {
    try {
      ModelConfig::load(dir.path);
    } catch (const protocol::ValueError& e) {
      return std::string(e.what());
    }
    return std::string();
  });
  BOOST_REQUIRE_MESSAGE(load.wait_for(std::chrono::seconds(10)) == std::future_status::ready,
                        "reading a FIFO must not block");
  BOOST_TEST(load.get().find("is a FIFO; hotswap reads only regular files") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(to_json_round_trips) {
  json q3 = base("Qwen3ForCausalLM");
  q3["head_dim"] = 32;
  q3["tie_word_embeddings"] = true;
  auto c = ModelConfig::from_json(q3);
  auto again = ModelConfig::from_json(c.to_json());
  BOOST_TEST(again.head_dim == 32);
  BOOST_TEST(again.qk_norm);
  BOOST_TEST(again.tie_word_embeddings);
  BOOST_TEST(again.architecture_name() == "Qwen3ForCausalLM");
}

BOOST_AUTO_TEST_SUITE_END()
