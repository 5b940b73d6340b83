#include "worker/weight_checker.hpp"

#include <set>

#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"

namespace hotswap::worker {

WeightChecker::WeightChecker(std::shared_ptr<model_loader::ServableModel> model,
                             int data_parallel_rank, int global_rank)
    : model_(std::move(model)),
      // vLLM 0.33's _weight_checksum_prefix: dp, pp, pcp, tp — no ep part.
      key_prefix_("dp" + std::to_string(data_parallel_rank) + ":pp0:pcp0:tp0:"),
      global_rank_(global_rank) {}

nlohmann::json WeightChecker::handle(const nlohmann::json& params) {
  const auto request = protocol::WeightCheckerParams::from_json(params);
  auto digests = [&] {
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
    bool match = mismatches.empty();
    return {{"match", match},
            {"mismatches", mismatches},
            {"ranks", match ? nlohmann::json::array() : nlohmann::json::array({global_rank_})}};
  }
}

}  // namespace hotswap::worker
