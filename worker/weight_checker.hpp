// WeightChecker: vLLM's weight_checker route. `checksum` returns SHA-256 digests of the runtime
// tensors keyed `dp<R>:pp0:pcp0:tp0:ep0:<name>` (or, with "format": "checkpoint", of the
// checkpoint-format tensors keyed by Hugging Face name) and keeps them as the baseline;
// `compare` checks the live weights against a given `baseline` (or the one kept for that
// format) and returns `match`, the `mismatches` and the `ranks` that mismatched; `reset`
// forgets the kept baselines.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "model_loader/llama_model.hpp"

namespace hotswap::worker {

class WeightChecker {
 public:
  WeightChecker(std::shared_ptr<const model_loader::LlamaModel> model, int data_parallel_rank,
                int global_rank);

  // Runs one action; ValueError for a bad action or body.
  nlohmann::json handle(const nlohmann::json& params);

 private:
  std::map<std::string, std::string> digests(bool checkpoint_format) const;

  std::shared_ptr<const model_loader::LlamaModel> model_;
  std::string key_prefix_;
  int global_rank_;
  std::mutex mutex_;
  std::map<bool, std::map<std::string, std::string>> baselines_;  // by checkpoint_format
};

}  // namespace hotswap::worker
