#include "receiver/sparse_broadcast_engine.hpp"

#include <ATen/ops/empty.h>

#include <utility>

#include "transport/torch_dtype.hpp"

namespace hotswap::receiver {

SparseBroadcastWeightTransferEngine::SparseBroadcastWeightTransferEngine(
    EngineContext context, std::string name,
    BroadcastWeightTransferEngine::CommunicatorFactory factory)
    : TypedWeightTransferEngine(std::move(context)),
      name_(std::move(name)),
      factory_(std::move(factory)) {}

void SparseBroadcastWeightTransferEngine::init_transfer_channel(
    const protocol::NcclInitInfo& info) {
  const int rank = static_cast<int>(info.rank_offset) + context().parallel.global_rank();
  if (rank >= info.world_size) {
    throw protocol::ValueError("this worker's rank " + std::to_string(rank) +
                               " is outside world_size " + std::to_string(info.world_size));
  }
  if (info.use_load_plan) {
    throw protocol::ValueError("use_load_plan is supported by the dense NCCL backend");
  }
  shutdown();
  communicator_ = factory_(info, rank, context().timeout);
}

void SparseBroadcastWeightTransferEngine::shutdown() {
  if (communicator_) communicator_->abort();
  communicator_.reset();
}

void SparseBroadcastWeightTransferEngine::receive_weights(
    const protocol::SparseNcclUpdateInfo& update_info) {
  if (!communicator_) {
    throw protocol::RuntimeError(std::string(name_.substr(0, name_.find("Weight"))) +
                                 " weight transfer not initialized. Call init_transfer_engine() "
                                 "first.");
  }
  // Values are merged into existing weights: only floating types make sense, checked before
  // the first collective.
  for (const auto& p : update_info.params) {
    if (!protocol::is_floating_point(p.dtype)) {
      throw protocol::ValueError("sparse values of '" + p.name + "' must be floating point, got " +
                                 std::string(protocol::dtype_name(p.dtype)));
    }
  }
  // Names, declared shapes (the full checkpoint shape) and storage are checked before the first
  // collective: a refused round moves no byte.
  {
    std::vector<model_loader::WeightPatch> declared;
    for (const auto& p : update_info.params) {
      auto options = at::TensorOptions().device(device());
      declared.push_back({p.name, at::empty({0}, options.dtype(at::kInt)),
                          at::empty({0}, options.dtype(transport::to_scalar_type(p.dtype))),
                          p.shape});
    }
    model().check_patches(declared);
  }
  std::vector<model_loader::WeightPatch> patches;
  try {
    for (std::size_t i = 0; i < update_info.params.size(); ++i) {
      const auto& p = update_info.params[i];
      const std::int64_t n = update_info.num_updates_list[i];
      auto options = at::TensorOptions().device(device());
      at::Tensor indices = at::empty({n}, options.dtype(at::kInt));
      at::Tensor values = at::empty({n}, options.dtype(transport::to_scalar_type(p.dtype)));
      communicator_->broadcast(indices, /*root=*/0, context().timeout);
      communicator_->broadcast(values, /*root=*/0, context().timeout);
      patches.push_back({p.name, indices, values, p.shape});
      add_bytes_received(static_cast<std::uint64_t>(indices.nbytes() + values.nbytes()));
    }
  } catch (const protocol::Error& e) {
    if (e.kind() == protocol::ErrorKind::kTransferError ||
        e.kind() == protocol::ErrorKind::kTimeoutError) {
      shutdown();  // the group is out of step
    }
    throw;
  }
  model().check_patches(patches);  // a bad patch is refused now, though applied only at finish
  pending_.insert(pending_.end(), std::make_move_iterator(patches.begin()),
                  std::make_move_iterator(patches.end()));
}

void SparseBroadcastWeightTransferEngine::finish_weight_update() {
  auto patches = std::exchange(pending_, {});
  if (!patches.empty()) model().apply_patches(patches);
}

std::unique_ptr<WeightTransferEngine> make_sparse_gloo_engine(const EngineContext& context) {
  return std::make_unique<SparseBroadcastWeightTransferEngine>(
      context, "SparseGlooWeightTransferEngine", gloo_communicator_factory());
}

}  // namespace hotswap::receiver
