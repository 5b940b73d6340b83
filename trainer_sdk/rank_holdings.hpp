// RankHoldings: what one trainer rank declares at init when every rank sends the parameters it
// holds (expert or pipeline parallelism): its metadata() and its held_names(). Rank 0 gathers
// every rank's, checks them against the ownership contract and decides who sends what:
//
//  - metadata() must describe the WHOLE model on every rank: the wire lists, the chunk plan and
//    every rank's iteration checks are built from it, so a rank that reported only its share
//    would leave the rest of the model silently un-transferred;
//  - every name must be held by at least one rank, or it can never be served: the first orphan
//    is named.
//
// Each name is then sent by the lowest rank that holds it (replicated names, such as the
// embeddings under expert parallelism, come from rank 0), which keeps runs of one sender long,
// and so packed chunks full.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/param_meta.hpp"

namespace hotswap::trainer_sdk {

struct RankHoldings {
  std::vector<protocol::ParamMeta> metadata;
  std::optional<std::vector<std::string>> held;  // nullopt: every parameter

  // vLLM's three parallel lists plus `held` (null for all): how a rank tells rank 0.
  nlohmann::json to_json() const;
  static RankHoldings from_json(const nlohmann::json& object);
};

// The rank that sends each parameter of ranks[0].metadata, indexed as it is; `ranks[r]` is rank
// r's. ValueError, with the contract's wording, when a rank's metadata differs from rank 0's,
// when a rank holds a name that metadata does not declare, or when a name is held by no rank.
std::vector<std::int64_t> assign_senders(std::span<const RankHoldings> ranks);

}  // namespace hotswap::trainer_sdk
