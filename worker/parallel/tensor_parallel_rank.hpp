// TensorParallelRank: a rank process of a tensor-parallel worker other than rank 0 (started by
// rank 0's TensorParallelGroup with --tensor-parallel-rank). It joins the ranks' groups (gloo,
// and NCCL on GPUs: RankCollectives), loads its shard of the model, builds its own receive
// engine (a rank of the trainer's group, vLLM's rank_offset + dp × tp + rank), and serves rank 0
// on two ROUTER sockets (IPC endpoints in a directory only its user can enter), each on a thread
// of its own: the model channel (forward steps over its copies of the sequences' KV caches,
// checksums, resets, LoRA adapters read from a path) and the weight channel (the four-call
// contract, each call taking this rank's element of a per-rank update_info; an adapter's round
// retargeted at a staging of this rank's own). Its shards of LoRA adapters are held under rank
// 0's ids, named by each step's slices and released by the step after rank 0's goes. It has no
// control socket, HTTP routes or scheduler, and ends with rank 0 (PR_SET_PDEATHSIG) or on SIGTERM.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "model_loader/kv_cache.hpp"
#include "model_loader/servable_model.hpp"
#include "worker/event_fd.hpp"
#include "worker/parallel/rank_collectives.hpp"
#include "worker/weight_update_controller.hpp"
#include "worker/worker_options.hpp"

namespace hotswap::worker {

class TensorParallelRank {
 public:
  explicit TensorParallelRank(const WorkerOptions& options);
  ~TensorParallelRank();

  // Prints the ready line ("hotswap-worker rank R ready: model <endpoint>; weights <endpoint>")
  // and serves until `stop` is notified; the exit status (1 after a failed forward step).
  int run(const EventFd& stop);

 private:
  nlohmann::json model_call(const std::string& method, const nlohmann::json& params);
  nlohmann::json weight_call(const std::string& method, const nlohmann::json& params);
  // An adapter's round (`lora` in start_weight_update's params: rank 0's id for it, its config
  // and the tensors it must bring): a staging that commits this rank's shard under that id.
  std::shared_ptr<model_loader::LoadableModel> lora_staging(const nlohmann::json& lora);
  // With loras_mutex_ held: lets go the adapters `params`' "released_loras" names (rank 0 let
  // them go; sent with steps, adapter loads and rounds' starts).
  void release_loras(const nlohmann::json& params);
  // Answers requests on `socket` with `handle` until `stop`.
  void serve(zmq::socket_t& socket, const EventFd& stop,
             nlohmann::json (TensorParallelRank::*handle)(const std::string&,
                                                          const nlohmann::json&));

  WorkerOptions options_;
  std::unique_ptr<RankCollectives> collectives_;  // before the model, which all-reduces over it
  std::shared_ptr<model_loader::ServableModel> model_;
  std::unique_ptr<WeightUpdateController> controller_;
  std::map<std::uint64_t, model_loader::KvCache> caches_;  // rank 0's cache id → this rank's heads
  // Rank 0's adapter id → this rank's shard of it: read on the model thread, committed and let go
  // on either (a round's commit runs between two steps, rank 0 holding the model channel).
  std::mutex loras_mutex_;
  std::map<std::uint64_t, std::shared_ptr<const model_loader::LoraAdapter>> loras_;
  zmq::context_t context_;
  std::string socket_dir_;  // private (0700): the two IPC endpoints
  zmq::socket_t model_socket_, weight_socket_;
  std::atomic<bool> failed_{false};
};

// hotswap-worker's main for --tensor-parallel-rank > 0.
int run_tensor_parallel_rank(const WorkerOptions& options, const EventFd& stop);

}  // namespace hotswap::worker
