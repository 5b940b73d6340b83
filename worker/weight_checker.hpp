// WeightChecker: vLLM's weight_checker route. `checksum` returns SHA-256 digests of the runtime
// tensors keyed `dp<R>:pp0:pcp0:tp<T>:<name>` (or, with "format": "checkpoint", of the
// checkpoint-format tensors keyed by Hugging Face name); `compare` checks them against the
// given `baseline` and returns `match`, the sorted `mismatches` (keys whose digests differ or
// that only one side has) and the `ranks` that mismatched; `reset` zeroes every weight, as
// vLLM's does, so that a following update can be seen to land whole. With `lora_name`
// (hotswap's extension), `checksum` and `compare` address that LoRA adapter: the digests of its
// tensors as they arrived, keyed by PEFT's saved names (LoraAdapter::checksums).
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "model_loader/servable_model.hpp"
#include "receiver/engine_context.hpp"
#include "worker/serving/lora_registry.hpp"

namespace hotswap::worker {

class WeightChecker {
 public:
  // Keys and ranks follow `parallel` (dp, and tp: every tensor-parallel rank's tensors are
  // listed, keyed by its own tp index, and `ranks` names the global ranks that mismatched).
  // `loras` (may be null: no adapters) must outlive the checker.
  WeightChecker(std::shared_ptr<model_loader::ServableModel> model,
                const receiver::ParallelConfig& parallel, const LoraRegistry* loras = nullptr);

  // Runs one action; ValueError for a bad action or body.
  nlohmann::json handle(const nlohmann::json& params);

 private:
  std::shared_ptr<model_loader::ServableModel> model_;
  std::string key_prefix_;
  receiver::ParallelConfig parallel_;
  const LoraRegistry* loras_;
};

}  // namespace hotswap::worker
