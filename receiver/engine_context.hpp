// What a receive engine is built with: vLLM's (config, vllm_config, device, model), reduced to
// what hotswap's engines use.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <memory>

#include "model_loader/loadable_model.hpp"
#include "protocol/timeouts.hpp"
#include "protocol/weight_transfer_config.hpp"

namespace hotswap::receiver {

// The worker's place among the inference ranks: a replica (one hotswap-worker) is
// tensor_parallel_size rank processes, one per device (pipeline parallelism is 1), and every
// rank is a rank of the trainer's group with vLLM's rank math:
// rank = rank_offset + data_parallel_rank × world_size() + rank.
struct ParallelConfig {
  int data_parallel_rank = 0;
  int data_parallel_size = 1;
  int tensor_parallel_size = 1;
  int pipeline_parallel_size = 1;
  int rank = 0;  // within the data-parallel replica

  // Ranks per replica (TP × PP), vLLM's `world_size`.
  int world_size() const { return tensor_parallel_size * pipeline_parallel_size; }
  // This rank's index among every inference rank: which element of a per-rank update_info list
  // it takes, and (plus rank_offset) its rank in a transfer group.
  int global_rank() const { return data_parallel_rank * world_size() + rank; }
};

struct EngineContext {
  protocol::WeightTransferConfig config;
  ParallelConfig parallel;
  c10::Device device = c10::Device(c10::kCPU);
  std::shared_ptr<model_loader::LoadableModel> model;
  // The bound of every blocking wait in the engine (the worker's --timeout).
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};
};

}  // namespace hotswap::receiver
