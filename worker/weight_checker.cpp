#include "worker/weight_checker.hpp"

#include <set>

#include "model_loader/lora/lora_adapter.hpp"
#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"

namespace hotswap::worker {

WeightChecker::WeightChecker(std::shared_ptr<model_loader::ServableModel> model,
                             const receiver::ParallelConfig& parallel, const LoraRegistry* loras)
    : model_(std::move(model)),
      // vLLM 0.33's _weight_checksum_prefix: dp, pp, pcp, tp — no ep part. Each tensor-parallel
      // rank writes its own index for {tp} (ServableModel::runtime_checksums).
      key_prefix_("dp" + std::to_string(parallel.data_parallel_rank) + ":pp0:pcp0:tp{tp}:"),
      parallel_(parallel),
      loras_(loras) {}

namespace {
// The tp index a runtime key names ("dp0:pp0:pcp0:tp1:..."); 0 for a checkpoint-format key.
int tp_of(const std::string& key) {
  auto at = key.find(":tp");
  if (at == std::string::npos) return 0;
  try {
    return std::stoi(key.substr(at + 3));
  } catch (const std::exception&) {
    return 0;
  }
}
}  // namespace

nlohmann::json WeightChecker::handle(const nlohmann::json& params) {
  const auto request = protocol::WeightCheckerParams::from_json(params);
  auto digests = [&]() -> std::map<std::string, std::string> {
    if (request.lora_name) {
      if (loras_ == nullptr) throw protocol::ValueError("this worker serves no LoRA adapters");
      return loras_->served(*request.lora_name).adapter->checksums();
    }
    return request.format == "checkpoint" ? model_->checkpoint_checksums()
                                          : model_->runtime_checksums(key_prefix_);
  };
  if (request.action == "checksum") return {{"checksums", digests()}};
  if (request.action == "reset") {
    model_->zero_weights();
    return {{"status", "reset"}};
  }
  {  // compare
    const auto& baseline = request.baseline;
    auto sums = digests();
    std::set<std::string> mismatches;
    for (const auto& [name, hex] : baseline) {
      auto found = sums.find(name);
      if (found == sums.end() || found->second != hex) mismatches.insert(name);
    }
    for (const auto& [name, hex] : sums) {
      if (!baseline.contains(name)) mismatches.insert(name);
    }
    std::set<int> ranks;
    for (const auto& key : mismatches) {
      int tp = request.format == "checkpoint" || request.lora_name ? 0 : tp_of(key);
      if (tp < 0 || tp >= parallel_.tensor_parallel_size) tp = 0;  // a key of no rank of ours
      ranks.insert(parallel_.data_parallel_rank * parallel_.world_size() + tp);
    }
    return {{"match", mismatches.empty()}, {"mismatches", mismatches}, {"ranks", ranks}};
  }
}

}  // namespace hotswap::worker
