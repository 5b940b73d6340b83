#include "trainer_sdk/ipc_trainer_engine.hpp"

#include "protocol/chunk_plan.hpp"
#include "protocol/errors.hpp"
#include "protocol/ipc_info.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "transport/cuda_ipc.hpp"
#include "transport/device.hpp"

namespace hotswap::trainer_sdk {

struct IpcTrainerEngine::Buffer {
  Buffer(std::size_t bytes, int device)
      : memory(bytes, device), handle(transport::export_device_memory(memory.data(), bytes)) {}
  transport::DeviceBuffer memory;
  protocol::IpcHandle handle;  // exported once, reused for every chunk
};

IpcTrainerEngine::IpcTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                                   std::shared_ptr<WeightSource> source,
                                   const IpcTrainerInitInfo& info)
    : TrainerWeightTransferEngine(std::move(client), std::move(source), info.is_sender()),
      info_(info) {}

IpcTrainerEngine::~IpcTrainerEngine() = default;

std::unique_ptr<IpcTrainerEngine> IpcTrainerEngine::trainer_init(
    const IpcTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  if (!transport::built_with_cuda()) {
    transport::throw_needs_gpu_build("the ipc trainer engine needs");
  }
  if (!source) throw protocol::ValueError("IPC trainer weight transfer requires a WeightSource.");
  if (info.packed && info.packed_buffer_size_bytes < 1) {
    throw protocol::ValueError("packed_buffer_size_bytes must be positive, got " +
                               std::to_string(info.packed_buffer_size_bytes));
  }
  auto engine = std::make_unique<IpcTrainerEngine>(client, source, info);
  if (!engine->is_sender()) return engine;
  if (info.packed) {
    engine->buffer_ = std::make_shared<Buffer>(
        static_cast<std::size_t>(info.packed_buffer_size_bytes), info.device);
  }
  const nlohmann::json payload = protocol::IpcInitInfo{info.packed}.to_json();
  init_workers(client, payload, info.timeout);
  return engine;
}

void IpcTrainerEngine::send_weights() {
  auto meta = source()->metadata();
  if (!is_sender()) {
    iterate_without_sending();
    return;
  }
  if (info_.packed) {
    send_packed(meta);
  } else {
    send_unpacked(meta);
  }
}

void IpcTrainerEngine::send_unpacked(const std::vector<protocol::ParamMeta>& meta) {
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(info_.device));
  transport::DeviceScope scope(device);
  const std::string uuid = transport::device_uuid(info_.device);
  CheckedStream stream(source()->iter(), meta, device);
  protocol::IpcUpdateInfo update{meta, {}, std::nullopt, {}};
  std::vector<at::Tensor> exported;  // held by retained_ once their handles go out
  for (std::size_t i = 0; i < meta.size(); ++i) {
    exported.push_back(stream.next());
    // An empty tensor has no memory to export: a handle of zeros that the worker never opens.
    protocol::IpcHandle handle{std::vector<std::uint8_t>(protocol::kCudaIpcHandleBytes, 0), 0, 0};
    if (meta[i].nbytes() > 0) {
      handle = transport::export_device_memory(exported.back().data_ptr(), meta[i].nbytes());
    }
    update.handles.push_back({{uuid, handle}});
  }
  stream.finish();
  // Every write to the tensors has landed, on whichever stream made it, before the worker (in
  // another process, unordered with this one's streams) reads them.
  transport::synchronize_device(device);
  const nlohmann::json update_info = update.to_json();
  retained_.release_after([&] {
    run_round(round_version(), [&] {
      // Held from before the handles go out until the worker has said it closed them.
      for (const auto& t : exported)
        retained_.retain(std::make_shared<at::Tensor>(t));
      update_in_place(update_info, info_.timeout);
    });
  });
}

void IpcTrainerEngine::send_packed(const std::vector<protocol::ParamMeta>& meta) {
  if (!buffer_) throw protocol::RuntimeError("the IPC buffer is closed; call trainer_init again");
  const c10::Device device(c10::kCUDA, static_cast<c10::DeviceIndex>(info_.device));
  transport::DeviceScope scope(device);
  const std::string uuid = transport::device_uuid(info_.device);
  const auto plan =
      protocol::plan_ipc_chunks(meta, static_cast<std::uint64_t>(info_.packed_buffer_size_bytes));
  CheckedStream stream(source()->iter(), meta, device);
  retained_.release_after([&] {
    run_round(round_version(), [&] {
      // The worker opens it with the first chunk and keeps it mapped until the round's finish.
      retained_.retain(buffer_);
      for (const auto& chunk : plan) {
        protocol::IpcUpdateInfo update;
        update.packed_handle = protocol::IpcHandleSet{{uuid, buffer_->handle}};
        for (const auto& slice : chunk.slices) {
          at::Tensor t = stream.next();
          // On the stream the caller's tensors were written on, so that each is read whole.
          transport::copy_device_bytes(buffer_->memory.data() + slice.offset, t.data_ptr(),
                                       slice.size, info_.device);
          update.params.push_back(meta[slice.param_index]);
          update.tensor_sizes.push_back(slice.size);
        }
        // A device-to-device copy does not make the host wait: the chunk must be whole before its
        // handle goes out, or the worker, in another process, reads it half-written.
        transport::wait_for_current_stream(info_.device);
        // Returns once the worker has copied the chunk out and synchronized: the buffer is free.
        update_in_place(update.to_json(), info_.timeout);
      }
      stream.finish();
    });
  });
}

void IpcTrainerEngine::shutdown() {
  retained_.end_session(client());
  buffer_.reset();  // freed here only if no worker may map it; otherwise retained_ still holds it
}

}  // namespace hotswap::trainer_sdk
