// IpcWeightTransferEngine: the worker side of the `ipc` backend, a trainer and a worker sharing
// one GPU. Each update_info offers, per parameter (unpacked) or per chunk (packed, one buffer
// the trainer reuses), CUDA IPC exports keyed by GPU UUID, as JSON (protocol/ipc_info.hpp). The
// engine picks the export for its own GPU (vLLM's message naming the available UUIDs when there
// is none), opens each exported allocation once per round, copies every tensor straight into
// the model's staged copy where it can (else through a buffer and load_weights), and closes the
// mappings at finish, at an abort and at shutdown, so no trainer memory stays mapped between
// rounds.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "protocol/ipc_info.hpp"
#include "receiver/weight_transfer_engine.hpp"

namespace hotswap::receiver {

// Where one parameter's bytes are: an export offered for this GPU, and a range inside it.
struct IpcSource {
  const protocol::IpcHandle* handle;
  std::uint64_t offset;  // from the start of the exported allocation
  std::uint64_t bytes;
};

// Every parameter's source among the exports offered for GPU `uuid`. ValueError with vLLM's
// message ("IPC handle not found for GPU UUID <u>. Available UUIDs: [...]") when this GPU has
// none. No CUDA needed: tested anywhere.
std::vector<IpcSource> locate_ipc_sources(const protocol::IpcUpdateInfo& update_info,
                                          const std::string& uuid);

class IpcWeightTransferEngine final
    : public TypedWeightTransferEngine<protocol::IpcInitInfo, protocol::IpcUpdateInfo> {
 public:
  explicit IpcWeightTransferEngine(EngineContext context);
  ~IpcWeightTransferEngine() override;

  std::string_view name() const override { return "IPCWeightTransferEngine"; }
  void start_weight_update() override { model().start_reload(); }
  void finish_weight_update() override;
  void abort_weight_update() override;
  void shutdown() override;

 protected:
  void init_transfer_channel(const protocol::IpcInitInfo& init_info) override;
  void receive_weights(const protocol::IpcUpdateInfo& update_info) override;

 private:
  struct Mappings;  // the opened allocations, by handle bytes (GPU builds)
  std::unique_ptr<Mappings> mappings_;
  const std::string uuid_;  // this worker's GPU
};

std::unique_ptr<WeightTransferEngine> make_ipc_engine(const EngineContext& context);

}  // namespace hotswap::receiver
