// hotswap-make-model: writes a Hugging Face checkpoint with deterministic random weights, for
// tests, the demo and benchmarks (several GB in seconds).
#include <CLI/CLI.hpp>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "model_loader/architecture_registry.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "model_loader/tokenizer/tokenizer.hpp"
#include "protocol/errors.hpp"

using namespace hotswap;

int main(int argc, char** argv) {
  CLI::App app{"Write a Hugging Face checkpoint with deterministic random weights"};
  std::string arch, dtype = "float32", out, tokenizer_file, chat_template_file;
  model_loader::ModelConfig config;
  std::int64_t head_dim = 0;
  std::uint64_t seed = 0, shard_size = 0;
  std::string model_types;
  for (const auto& a : model_loader::ArchitectureRegistry::builtin().all())
    model_types += (model_types.empty() ? "" : " | ") + a.model_type;
  app.add_option("--arch", arch, model_types)->required();
  app.add_option("--layers", config.num_hidden_layers, "decoder layers")->required();
  app.add_option("--hidden-size", config.hidden_size)->required();
  app.add_option("--intermediate-size", config.intermediate_size,
                 "the dense MLP's width (Mixtral: each expert's)")
      ->required();
  app.add_option("--heads", config.num_attention_heads, "attention heads")->required();
  app.add_option("--kv-heads", config.num_key_value_heads, "key/value heads")->required();
  app.add_option("--head-dim", head_dim, "default: hidden-size / heads");
  app.add_option("--vocab", config.vocab_size)->required();
  app.add_option("--dtype", dtype, "float32 | bfloat16 | float16");
  app.add_flag("--tie-word-embeddings", config.tie_word_embeddings);
  app.add_option("--num-experts", config.num_experts, "qwen3_moe, mixtral: experts per layer");
  app.add_option("--num-experts-per-tok", config.num_experts_per_tok,
                 "qwen3_moe, mixtral: experts each token takes");
  app.add_option("--moe-intermediate-size", config.moe_intermediate_size,
                 "qwen3_moe: each expert's width");
  app.add_flag("--norm-topk-prob", config.norm_topk_prob,
               "qwen3_moe: rescale the chosen experts' weights to sum to 1");
  app.add_option("--seed", seed);
  app.add_option("--shard-size", shard_size, "bytes of tensor data per safetensors shard");
  app.add_option("--tokenizer", tokenizer_file,
                 "a tokenizer.json to copy into the model (its vocabulary must fit --vocab)");
  app.add_option("--chat-template", chat_template_file,
                 "a chat template (Jinja) to copy into the model as chat_template.jinja")
      ->check(CLI::ExistingFile);
  app.add_option("--out", out, "output directory")->required();
  CLI11_PARSE(app, argc, argv);

  try {
    // Build the config through the same parser a real config.json goes through, so every
    // architecture rule (Qwen2 biases, Qwen3 q/k norms) applies.
    nlohmann::json json = {
        {"architectures",
         {model_loader::ArchitectureRegistry::builtin().find_by_model_type(arch).name}},
        {"hidden_size", config.hidden_size},
        {"intermediate_size", config.intermediate_size},
        {"num_hidden_layers", config.num_hidden_layers},
        {"num_attention_heads", config.num_attention_heads},
        {"num_key_value_heads", config.num_key_value_heads},
        {"vocab_size", config.vocab_size},
        {"tie_word_embeddings", config.tie_word_embeddings},
        {"torch_dtype", dtype},
        {"max_position_embeddings", 4096},
    };
    if (head_dim > 0) json["head_dim"] = head_dim;
    // Mixture-of-experts fields, under both names transformers has used for the count; each
    // architecture reads the ones it has, with transformers' defaults for the rest.
    if (config.num_experts > 0)
      json["num_experts"] = json["num_local_experts"] = config.num_experts;
    if (config.num_experts_per_tok > 0) json["num_experts_per_tok"] = config.num_experts_per_tok;
    if (config.moe_intermediate_size > 0) {
      json["moe_intermediate_size"] = config.moe_intermediate_size;
    }
    if (config.norm_topk_prob) json["norm_topk_prob"] = true;
    auto parsed = model_loader::ModelConfig::from_json(json);
    if (!tokenizer_file.empty()) {
      // Loaded first: a tokenizer the worker would refuse, or ids the model has no row for,
      // fail here rather than when the model is served.
      auto tokenizer = model_loader::Tokenizer::from_file(tokenizer_file);
      if (tokenizer.vocab_size() > parsed.vocab_size) {
        throw protocol::ValueError("tokenizer " + tokenizer_file + " has ids up to " +
                                   std::to_string(tokenizer.vocab_size() - 1) +
                                   ", more than --vocab " + std::to_string(parsed.vocab_size) +
                                   " rows of the embedding");
      }
    }
    auto start = std::chrono::steady_clock::now();
    model_loader::SyntheticCheckpointOptions options;
    options.seed = seed;
    if (shard_size > 0) options.shard_size_bytes = shard_size;
    std::uint64_t bytes = model_loader::write_synthetic_checkpoint(out, parsed, options);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!tokenizer_file.empty()) {
      std::filesystem::copy_file(tokenizer_file, std::filesystem::path(out) / "tokenizer.json",
                                 std::filesystem::copy_options::overwrite_existing);
    }
    // Where transformers saves a model's template, and where the worker looks first.
    if (!chat_template_file.empty()) {
      std::filesystem::copy_file(chat_template_file,
                                 std::filesystem::path(out) / "chat_template.jinja",
                                 std::filesystem::copy_options::overwrite_existing);
    }
    std::cout << "wrote " << parsed.architecture_name() << " checkpoint to " << out << ": " << bytes
              << " bytes of " << dtype << " weights in " << seconds << " s\n";
  } catch (const std::exception& e) {
    std::cerr << "hotswap-make-model: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
