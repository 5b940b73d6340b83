// hotswap-generate: loads a checkpoint and generates from token ids, printing
// {"token_ids": [...], "logprobs": [...]} for the generated tokens.
#include <CLI/CLI.hpp>

#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"
#include "protocol/errors.hpp"

using namespace hotswap;

int main(int argc, char** argv) {
  CLI::App app{"Generate tokens with a Llama-family checkpoint"};
  std::string model_dir, prompt_ids, dtype, quantization;
  model_loader::SamplingParams params;
  params.temperature = 0.0;
  std::uint64_t seed = 0;
  bool json_output = false;
  app.add_option("--model", model_dir, "checkpoint directory")->required();
  app.add_option("--prompt-ids", prompt_ids, "comma-separated token ids, e.g. 1,2,3")->required();
  app.add_option("--max-tokens", params.max_tokens)->required();
  app.add_option("--temperature", params.temperature, "0 is greedy (default)");
  app.add_option("--top-p", params.top_p);
  auto* seed_option = app.add_option("--seed", seed);
  app.add_option("--dtype", dtype, "float32 | bfloat16 | float16 (default: the checkpoint's)");
  app.add_option("--quantization", quantization, "int8");
  app.add_flag("--json", json_output, "print one JSON object");
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<std::int64_t> prompt;
    std::stringstream in(prompt_ids);
    for (std::string item; std::getline(in, item, ',');) {
      std::size_t used = 0;
      prompt.push_back(std::stoll(item, &used));
      if (used != item.size()) throw protocol::ValueError("bad token id '" + item + "'");
    }
    if (*seed_option) params.seed = seed;
    model_loader::ModelOptions options;
    if (!dtype.empty()) options.dtype = protocol::dtype_from_name(dtype);
    if (!quantization.empty()) {
      if (quantization != "int8") {
        throw protocol::ValueError("unknown quantization '" + quantization + "' (int8 is known)");
      }
      options.quantize_int8 = true;
    }
    auto model = model_loader::load_model(model_dir, options);
    auto result = model_loader::generate(*model, {prompt}, params).at(0);
    nlohmann::json out = {{"token_ids", result.token_ids}, {"logprobs", result.logprobs}};
    if (json_output) {
      std::cout << out.dump() << "\n";
    } else {
      std::cout << "tokens: " << out["token_ids"].dump() << "\nlogprobs: " << out["logprobs"].dump()
                << "\nfinish_reason: " << result.finish_reason << "\n";
    }
  } catch (const std::invalid_argument&) {
    std::cerr << "hotswap-generate: --prompt-ids must be comma-separated integers\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "hotswap-generate: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
