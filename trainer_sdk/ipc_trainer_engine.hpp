// IpcTrainerEngine: the trainer side of the `ipc` backend, for a trainer that shares its GPU
// with the worker. Nothing is sent over a network: the worker reads the trainer's GPU memory
// through CUDA IPC exports that travel as JSON in update_info (never a pickle).
//
// - unpacked (default): one export per tensor of the source's own memory, all in one
//   update_weights call; no copy on the trainer side at all.
// - packed: one device buffer of packed_buffer_size_bytes, exported once and reused; chunks by
//   vLLM's IPC rule (flush before overflowing; a tensor larger than the buffer is a ValueError
//   before any RPC), one update_weights call per chunk, each returning once the worker has
//   copied the chunk out, so the buffer can be refilled.
//
// init and each update_weights run on a side thread, bounded by `timeout`, as on the other
// backends: the trainer waits for the worker's read without being held past its timeout, and
// the fault-injection points (round_hook.hpp) fall inside those calls.
#pragma once

#include <chrono>
#include <memory>

#include "protocol/backend_names.hpp"
#include "protocol/nccl_info.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

namespace hotswap::trainer_sdk {

struct IpcTrainerInitInfo : TrainerInitInfoFor<IpcTrainerInitInfo> {
  static constexpr std::string_view backend = protocol::backends::kIpc;
  explicit IpcTrainerInitInfo(int rank) : TrainerInitInfoFor(rank) {}
  bool packed = false;
  std::int64_t packed_buffer_size_bytes = protocol::kDefaultPackedBufferSizeBytes;
  int device = 0;  // the CUDA device the trainer and the worker share
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};  // for each control call
};

class IpcTrainerEngine final : public TrainerWeightTransferEngine {
 public:
  using InitInfo = IpcTrainerInitInfo;
  static std::unique_ptr<IpcTrainerEngine> trainer_init(const IpcTrainerInitInfo& info,
                                                        std::shared_ptr<WeightSyncClient> client,
                                                        std::shared_ptr<WeightSource> source);
  IpcTrainerEngine(std::shared_ptr<WeightSyncClient> client, std::shared_ptr<WeightSource> source,
                   const IpcTrainerInitInfo& info);
  ~IpcTrainerEngine() override;

  void send_weights() override;
  void shutdown() override;

 private:
  void send_unpacked(const std::vector<protocol::ParamMeta>& meta);
  void send_packed(const std::vector<protocol::ParamMeta>& meta);

  IpcTrainerInitInfo info_;
  struct Buffer;  // the packed buffer
  std::unique_ptr<Buffer> buffer_;
};

}  // namespace hotswap::trainer_sdk
