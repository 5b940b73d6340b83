#include "worker/weight_checker.hpp"

#include <set>

#include "protocol/errors.hpp"

namespace hotswap::worker {

WeightChecker::WeightChecker(std::shared_ptr<model_loader::LlamaModel> model,
                             int data_parallel_rank, int global_rank)
    : model_(std::move(model)),
      key_prefix_("dp" + std::to_string(data_parallel_rank) + ":pp0:pcp0:tp0:ep0:"),
      global_rank_(global_rank) {}

nlohmann::json WeightChecker::handle(const nlohmann::json& params) {
  std::string action = params.value("action", std::string());
  std::string format = params.value("format", std::string("runtime"));
  if (format != "runtime" && format != "checkpoint") {
    throw protocol::ValueError("Invalid weight_checker format '" + format +
                               "': expected runtime or checkpoint");
  }
  auto digests = [&] {
    return format == "checkpoint" ? model_->checkpoint_checksums()
                                  : model_->runtime_checksums(key_prefix_);
  };
  if (action == "checksum") return {{"checksums", digests()}};
  if (action == "reset") {
    model_->zero_weights();
    return {{"status", "reset"}};
  }
  if (action == "compare") {
    auto it = params.find("baseline");
    if (it == params.end() || !it->is_object()) {
      throw protocol::ValueError("action='compare' requires a 'baseline' object");
    }
    std::map<std::string, std::string> baseline;
    for (const auto& [name, hex] : it->items()) {
      if (!hex.is_string())
        throw protocol::ValueError("`baseline['" + name + "']` must be a string");
      baseline[name] = hex.get<std::string>();
    }
    auto sums = digests();
    std::set<std::string> mismatches;
    for (const auto& [name, hex] : baseline) {
      auto found = sums.find(name);
      if (found == sums.end() || found->second != hex) mismatches.insert(name);
    }
    for (const auto& [name, hex] : sums) {
      if (!baseline.contains(name)) mismatches.insert(name);
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
