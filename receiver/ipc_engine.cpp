#include "receiver/ipc_engine.hpp"

#include <ATen/ops/empty.h>

#include "protocol/errors.hpp"
#include "transport/cuda_ipc.hpp"
#include "transport/device.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::receiver {
namespace {

const protocol::IpcHandle& handle_for(const protocol::IpcHandleSet& offered,
                                      const std::string& uuid) {
  auto it = offered.find(uuid);
  if (it == offered.end()) {
    std::string available = "[";
    for (const auto& [key, handle] : offered)
      available += (available.size() > 1 ? ", '" : "'") + key + "'";
    throw protocol::ValueError("IPC handle not found for GPU UUID " + uuid +
                               ". Available UUIDs: " + available + "]");
  }
  return it->second;
}

}  // namespace

std::vector<IpcSource> locate_ipc_sources(const protocol::IpcUpdateInfo& info,
                                          const std::string& uuid) {
  std::vector<IpcSource> out;
  if (!info.is_packed()) {
    for (std::size_t i = 0; i < info.params.size(); ++i) {
      const auto& h = handle_for(info.handles[i], uuid);
      out.push_back({&h, h.offset_bytes, info.params[i].nbytes()});
    }
    return out;
  }
  // Packed: the chunk's tensors one after another from the start of the export (that they fit
  // in it, IpcUpdateInfo::from_json has checked).
  const auto& h = handle_for(*info.packed_handle, uuid);
  std::uint64_t at = 0;
  for (std::size_t i = 0; i < info.params.size(); ++i) {
    out.push_back({&h, h.offset_bytes + at, info.tensor_sizes[i]});
    at += info.tensor_sizes[i];
  }
  return out;
}

struct IpcWeightTransferEngine::Mappings {
  std::map<std::vector<std::uint8_t>, transport::IpcMapping> open;
  // Unmaps every export. A receive that failed part-way may have left copies out of them in
  // flight: they finish before the trainer's memory goes away under them.
  void clear(const c10::Device& device) {
    if (open.empty()) return;
    try {
      transport::synchronize_device(device);
    } catch (...) {  // a failed device fails the copies too; unmapping is still right
    }
    open.clear();
  }
};

IpcWeightTransferEngine::IpcWeightTransferEngine(EngineContext context)
    : TypedWeightTransferEngine(std::move(context)),
      mappings_(std::make_unique<Mappings>()),
      uuid_(transport::device_uuid(transport::cuda_index(device()))) {}

IpcWeightTransferEngine::~IpcWeightTransferEngine() = default;

void IpcWeightTransferEngine::init_transfer_channel(const protocol::IpcInitInfo&) {
  mappings_->clear(device());  // no rendezvous: the handles come with each update
}

void IpcWeightTransferEngine::finish_weight_update() {
  mappings_->clear(device());
  model().finish_reload();
}

void IpcWeightTransferEngine::abort_weight_update() {
  mappings_->clear(device());
  WeightTransferEngine::abort_weight_update();
}

void IpcWeightTransferEngine::shutdown() {
  mappings_->clear(device());
}

void IpcWeightTransferEngine::receive_weights(const protocol::IpcUpdateInfo& update_info) {
  const auto sources = locate_ipc_sources(update_info, uuid_);  // every check before any copy
  const int index = transport::cuda_index(device());
  // Copies are queued on libtorch's current stream; the update's caller synchronizes the device
  // before it answers, and the trainer reuses or frees its memory only after that answer.
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& p = update_info.params[i];
    const auto& source = sources[i];
    const std::uint8_t* from = nullptr;
    if (source.bytes > 0) {  // an empty tensor's handle names nothing to open
      auto it = mappings_->open.find(source.handle->handle);
      if (it == mappings_->open.end()) {
        it =
            mappings_->open
                .emplace(source.handle->handle, transport::IpcMapping(source.handle->handle, index))
                .first;
      }
      from = it->second.base() + source.offset;
    }
    const auto type = transport::to_scalar_type(p.dtype);
    // Straight into the staged copy where the model takes the bytes as they are.
    if (auto destination = model().destination_for(p.name, type, p.shape)) {
      transport::copy_device_bytes(destination->data_ptr(), from, source.bytes, index);
      model().mark_received(p.name);
    } else {
      at::Tensor t = at::empty(p.shape, at::TensorOptions().dtype(type).device(device()));
      transport::copy_device_bytes(t.data_ptr(), from, source.bytes, index);
      model().load_weights({{p.name, t}});
    }
    add_bytes_received(source.bytes);
  }
}

std::unique_ptr<WeightTransferEngine> make_ipc_engine(const EngineContext& context) {
  if (!transport::built_with_cuda()) transport::throw_needs_gpu_build("the ipc backend needs");
  if (!context.device.is_cuda()) {
    throw protocol::ValueError(
        "the ipc backend reads a colocated trainer's GPU memory, but this worker runs on " +
        context.device.str() + "; start it with --device cuda:N");
  }
  return std::make_unique<IpcWeightTransferEngine>(context);
}

}  // namespace hotswap::receiver
