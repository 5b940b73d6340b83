// Synthetic checkpoints: a valid Hugging Face checkpoint directory (config.json and
// safetensors, sharded on request) with deterministic random weights. Weights are drawn from a
// counter-based generator keyed by (seed, tensor name, element), filled in parallel straight
// into the mapped output files, so multi-GB checkpoints take seconds and the same seed always
// gives the same bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "model_loader/model_config.hpp"

namespace hotswap::model_loader {

struct SyntheticCheckpointOptions {
  std::uint64_t seed = 0;
  std::optional<std::uint64_t> shard_size_bytes;  // split into shards of at most this much data
  double scale = 1.0;  // multiplies the weights' spread (1.0: variance 1/fan_in)
};

// Writes config.json (from `config`, in config.torch_dtype) and the weights into `directory`
// (created if needed). Returns the bytes of tensor data written.
std::uint64_t write_synthetic_checkpoint(const std::filesystem::path& directory,
                                         const ModelConfig& config,
                                         const SyntheticCheckpointOptions& options = {});

}  // namespace hotswap::model_loader
