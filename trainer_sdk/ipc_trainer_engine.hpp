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
//
// The worker keeps what it opened mapped until the round's finish_weight_update (or an abort,
// or a shutdown of its channel), and freeing memory another process still maps is undefined
// behaviour. So every export is held (RetainedExports) from before its handle goes out until
// the worker has answered such a call; a round that failed or timed out leaves its exports held
// until a later round finishes or shutdown() gets the worker to close them, and an engine
// destroyed without that word leaks them on purpose rather than free them.
#pragma once

#include <array>
#include <chrono>
#include <memory>

#include "protocol/backend_names.hpp"
#include "protocol/nccl_info.hpp"
#include "protocol/timeouts.hpp"
#include "trainer_sdk/retained_exports.hpp"
#include "trainer_sdk/trainer_init_info.hpp"
#include "trainer_sdk/trainer_settings.hpp"
#include "trainer_sdk/trainer_weight_transfer_engine.hpp"

namespace hotswap::trainer_sdk {

struct IpcTrainerInitInfo : TrainerInitInfoFor<IpcTrainerInitInfo> {
  static constexpr std::string_view backend = protocol::backends::kIpc;
  explicit IpcTrainerInitInfo(int rank) : TrainerInitInfoFor(rank) {}
  bool packed = false;
  std::int64_t packed_buffer_size_bytes = protocol::kDefaultPackedBufferSizeBytes;
  int device = 0;  // the CUDA device the trainer and the worker share
  std::chrono::milliseconds timeout{protocol::kDefaultTimeout};  // for each control call

  static constexpr std::array settings_read = {settings::kPacked, settings::kBufferSize,
                                               settings::kDevice};
  static IpcTrainerInitInfo from_settings(const TrainerSettings& s) {
    IpcTrainerInitInfo info(s.rank);
    info.packed = s.packed;
    info.packed_buffer_size_bytes = s.packed_buffer_size_bytes;
    info.device = s.device;
    info.timeout = s.timeout;
    return info;
  }
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
  // When a failed round left exports held, first ends the workers' session and channel
  // (abort_and_shutdown_weight_transfer_engine, best effort): only their answer frees them.
  void shutdown() override;

  // How many exports (tensors, or the packed buffer) a worker may still map: those of rounds
  // that failed or timed out, until a later round finishes or shutdown() ends the session.
  std::size_t retained_exports() const { return retained_.size(); }

 private:
  void send_unpacked(const std::vector<protocol::ParamMeta>& meta);
  void send_packed(const std::vector<protocol::ParamMeta>& meta);

  IpcTrainerInitInfo info_;
  struct Buffer;                    // the packed buffer
  std::shared_ptr<Buffer> buffer_;  // shared with retained_ while a worker may map it
  RetainedExports retained_;
};

}  // namespace hotswap::trainer_sdk
