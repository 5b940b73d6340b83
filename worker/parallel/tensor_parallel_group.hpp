// TensorParallelGroup: rank 0's hold on the other rank processes of a tensor-parallel worker.
// It starts them (this binary, the same arguments, plus --tensor-parallel-rank and the group's
// port), forms the groups the model's all-reduces run over (RankCollectives: gloo, and NCCL on
// GPUs; rank 0 hosts the store), and opens two RankChannels to each: one for the model's steps,
// one for weight-transfer calls, so that a long receive never holds a generation step up. A
// thread watches the processes: one that exits puts the group in a failed state that names it,
// which every later call reports. Destruction stops every rank process.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <zmq.hpp>

#include "transport/child_process.hpp"
#include "transport/communicator.hpp"
#include "worker/parallel/rank_channel.hpp"
#include "worker/parallel/rank_collectives.hpp"
#include "worker/worker_options.hpp"

namespace hotswap::worker {

class TensorParallelGroup {
 public:
  // Starts ranks 1..N-1 and joins their groups as rank 0 (a ValueError first when the model
  // does not split N ways). Rank 0 then loads its own shard, which the others are loading too.
  explicit TensorParallelGroup(const WorkerOptions& options);
  ~TensorParallelGroup();
  // Returns once every rank has loaded its shard and answers; a RuntimeError carrying what a
  // rank printed when one exits or says nothing within the timeout. Starts the watcher.
  void wait_until_ready();

  int size() const { return size_; }
  // What rank 0's model shard all-reduces over (RankCollectives::for_model).
  std::shared_ptr<transport::Communicator> communicator() const {
    return collectives_->for_model();
  }
  std::chrono::milliseconds timeout() const { return timeout_; }

  enum class Channel { kModel, kWeights };
  // Sends `method` to every other rank on `channel` (each channel carries one call at a time:
  // callers of one channel are serialized by its lock, which the caller holds).
  void send_all(Channel channel, std::string_view method, const nlohmann::json& params);
  // Every rank's answer, in rank order (rank 1 first); the first error once all have answered
  // or timed out.
  std::vector<nlohmann::json> receive_all(Channel channel);
  // send_all, then `local` here while the other ranks run `method`, then receive_all: every
  // rank's answer, always collected (so the channel stays in step for the next call) even when
  // `local` failed; the first error then, rank 0's own first.
  std::vector<nlohmann::json> call_all(Channel channel, std::string_view method,
                                       const nlohmann::json& params,
                                       const std::function<void()>& local);
  std::mutex& lock(Channel channel) {
    return channel == Channel::kModel ? model_lock_ : weight_lock_;
  }

  // Whether another rank reported its shard dirty (an inplace round that failed part-way
  // there) in its last answer on the weight channel: the worker is then dirty as a whole.
  bool peers_dirty() const { return peers_dirty_; }
  // The bytes of weights each other rank had received at its last answer on the weight channel
  // (rank 1 first), for /metrics.
  std::vector<std::uint64_t> peer_bytes_received() const;

  // Why the group cannot serve (a rank process exited), or nothing.
  std::optional<std::string> failure() const;
  // Throws a RuntimeError with failure() when there is one.
  void check_alive() const;

 private:
  void watch();  // the watcher thread: forwards rank output to stderr, notices exits

  int size_;
  std::chrono::milliseconds timeout_;
  zmq::context_t context_;
  std::vector<std::unique_ptr<transport::ChildProcess>> ranks_;  // rank r at r - 1
  std::unique_ptr<RankCollectives> collectives_;
  std::vector<std::unique_ptr<RankChannel>> model_channels_, weight_channels_;
  std::mutex model_lock_, weight_lock_;
  mutable std::mutex state_mutex_;  // guards failure_ and the processes' output buffers
  std::optional<std::string> failure_;
  std::vector<std::uint64_t> peer_bytes_received_;  // guarded by state_mutex_ too
  std::atomic<bool> stopping_{false};
  std::atomic<bool> peers_dirty_{false};
  std::thread watcher_;
};

}  // namespace hotswap::worker
