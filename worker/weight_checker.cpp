#include "worker/weight_checker.hpp"

#include "protocol/errors.hpp"

namespace hotswap::worker {

WeightChecker::WeightChecker(std::shared_ptr<const model_loader::LlamaModel> model,
                             int data_parallel_rank, int global_rank)
    : model_(std::move(model)),
      key_prefix_("dp" + std::to_string(data_parallel_rank) + ":pp0:pcp0:tp0:ep0:"),
      global_rank_(global_rank) {}

std::map<std::string, std::string> WeightChecker::digests(bool checkpoint_format) const {
  return checkpoint_format ? model_->checkpoint_checksums()
                           : model_->runtime_checksums(key_prefix_);
}

nlohmann::json WeightChecker::handle(const nlohmann::json& params) {
  std::string action = params.value("action", std::string());
  std::string format = params.value("format", std::string("runtime"));
  if (format != "runtime" && format != "checkpoint") {
    throw protocol::ValueError("Invalid weight_checker format '" + format +
                               "': expected runtime or checkpoint");
  }
  bool checkpoint = format == "checkpoint";
  if (action == "checksum") {
    auto sums = digests(checkpoint);
    std::lock_guard lock(mutex_);
    baselines_[checkpoint] = sums;
    return {{"checksums", sums}};
  }
  if (action == "reset") {
    std::lock_guard lock(mutex_);
    baselines_.clear();
    return {{"status", "reset"}};
  }
  if (action == "compare") {
    std::map<std::string, std::string> baseline;
    if (auto it = params.find("baseline"); it != params.end()) {
      if (!it->is_object()) throw protocol::ValueError("`baseline` must be an object {name: hex}");
      for (const auto& [name, hex] : it->items()) {
        if (!hex.is_string())
          throw protocol::ValueError("`baseline['" + name + "']` must be a string");
        baseline[name] = hex.get<std::string>();
      }
    } else {
      std::lock_guard lock(mutex_);
      auto kept = baselines_.find(checkpoint);
      if (kept == baselines_.end()) {
        throw protocol::ValueError(
            "compare needs a `baseline`, or a checksum of the same format "
            "taken before it");
      }
      baseline = kept->second;
    }
    auto sums = digests(checkpoint);
    nlohmann::json mismatches = nlohmann::json::array();
    for (const auto& [name, hex] : baseline) {
      auto it = sums.find(name);
      if (it == sums.end() || it->second != hex) mismatches.push_back(name);
    }
    for (const auto& [name, hex] : sums) {
      if (!baseline.contains(name)) mismatches.push_back(name);
    }
    bool match = mismatches.empty();
    return {{"match", match},
            {"mismatches", mismatches},
            {"ranks", match ? nlohmann::json::array() : nlohmann::json::array({global_rank_})}};
  }
  throw protocol::ValueError("Invalid weight_checker action '" + action +
                             "': expected checksum, compare or reset");
}

}  // namespace hotswap::worker
