// The calls rank 0 makes on the other tensor-parallel ranks, named once for both sides: the
// sender (TensorParallelModel, WeightUpdateController::on_every_rank) and the rank that serves
// them (TensorParallelRank). Model calls travel on the model channel, weight calls on the
// weights channel, so a long transfer never holds up a generation step. The weight calls share
// vLLM's method names where the worker has the same call.
#pragma once

#include <string_view>

#include "protocol/control_methods.hpp"

namespace hotswap::worker::rank_methods {

// Model channel.
inline constexpr std::string_view kForward = "forward";
inline constexpr std::string_view kZeroWeights = "zero_weights";
inline constexpr std::string_view kRuntimeChecksums = "runtime_checksums";
inline constexpr std::string_view kCheckpointChecksums = "checkpoint_checksums";
// Reads a LoRA adapter from a path onto the rank's shard, held under rank 0's id for it.
inline constexpr std::string_view kLoadLoraAdapter = "load_lora_adapter";

// Weights channel.
inline constexpr std::string_view kInitWeightTransferEngine =
    protocol::methods::kInitWeightTransferEngine;
inline constexpr std::string_view kStartWeightUpdate = protocol::methods::kStartWeightUpdate;
inline constexpr std::string_view kUpdateWeights = protocol::methods::kUpdateWeights;
// Drains what the rank's engine still has in flight, before any rank commits.
inline constexpr std::string_view kPrepareFinish = "prepare_finish";
inline constexpr std::string_view kFinishWeightUpdate = protocol::methods::kFinishWeightUpdate;
inline constexpr std::string_view kAbortWeightUpdate = "abort_weight_update";
inline constexpr std::string_view kShutdownWeightTransferEngine =
    protocol::methods::kShutdownWeightTransferEngine;

}  // namespace hotswap::worker::rank_methods
