// Which trainer rank holds which checkpoint tensor when a model is split the two ways RL
// trainers split MoE models, for hotswap-trainer --ranks N --shard and for tests:
//
//  - experts (expert parallelism): rank r holds the r-th contiguous block of each layer's experts
//    (`….experts.E.…`); every other tensor (attention, norms, routers, embeddings) is
//    replicated on every rank.
//  - layers (pipeline parallelism): rank r holds the r-th contiguous block of decoder layers,
//    keyed as layerwise_groups keys them (the outermost index); the embeddings go with the first
//    stage, the other tensors outside the layers (final norm, lm_head) with the last.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace hotswap::trainer_sdk {

enum class ShardBy { kExperts, kLayers };

// "experts" or "layers".
std::optional<ShardBy> shard_by_from_name(std::string_view name);

// The names, out of the checkpoint's `names`, that `rank` of `ranks` holds.
// ValueError when the split has nothing to split (no expert tensors, no layers).
std::unordered_set<std::string> held_by_rank(const std::vector<std::string>& names, ShardBy by,
                                             int rank, int ranks);

}  // namespace hotswap::trainer_sdk
