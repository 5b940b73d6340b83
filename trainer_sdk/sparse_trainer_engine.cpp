#include "trainer_sdk/sparse_trainer_engine.hpp"

#include <ATen/ops/_unique.h>

#include "protocol/nccl_info.hpp"
#include "protocol/param_meta.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {

void validate_patches(const std::vector<SparsePatch>& patches) {
  for (const auto& p : patches) {
    auto bad = [&](const std::string& what) {
      return protocol::ValueError("sparse patch '" + p.name + "': " + what);
    };
    if (p.full_shape.empty() && p.name.empty()) throw bad("needs a name");
    if (p.full_shape.empty()) throw bad("`full_shape` must be set (the checkpoint tensor's shape)");
    if (!p.indices.defined() || p.indices.scalar_type() != at::kInt || p.indices.dim() != 1) {
      throw bad("indices must be a 1-D int32 tensor");
    }
    if (!p.values.defined() || p.values.dim() != 1 || p.values.numel() != p.indices.numel()) {
      throw bad("values must be 1-D and as long as indices (" + std::to_string(p.indices.numel()) +
                ")");
    }
    if (!at::isFloatingType(p.values.scalar_type())) throw bad("values must be floating point");
    std::int64_t numel = 1;
    for (auto d : p.full_shape)
      numel *= d;
    if (p.indices.numel() > 0) {
      at::Tensor idx = p.indices.to(at::kLong);
      if (idx.min().item<std::int64_t>() < 0 || idx.max().item<std::int64_t>() >= numel) {
        throw bad("indices must lie in 0.." + std::to_string(numel - 1) + " for shape " +
                  protocol::shape_to_string(p.full_shape));
      }
      if (std::get<0>(at::_unique(idx)).numel() != idx.numel()) throw bad("indices must be unique");
      if (p.values.isnan().any().item<bool>()) throw bad("values must not be NaN");
    }
  }
}

SparseTrainerEngine::SparseTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                                         const SparseTransferParams& params, bool is_sender,
                                         SenderGroup group)
    : TrainerWeightTransferEngine(std::move(client), nullptr, is_sender),
      info_(params),
      group_(group) {}

template <class Engine>
std::unique_ptr<Engine> SparseTrainerEngine::open(const TrainerInitInfo& info,
                                                  const SparseTransferParams& params,
                                                  SenderGroup group,
                                                  std::shared_ptr<WeightSyncClient> client,
                                                  std::shared_ptr<WeightSource> source) {
  if (source) {
    throw protocol::ValueError(
        std::string(group.kind == SenderGroup::Kind::kGloo ? "Sparse Gloo" : "Sparse NCCL") +
        " weight transfer takes no WeightSource; pass each round's patches to "
        "send_weights(patches) instead.");
  }
  auto engine = std::make_unique<Engine>(client, params, info.is_sender(), group);
  if (!engine->is_sender()) return engine;
  // vLLM's sparse trainer ships unpacked defaults: sparse is never packed.
  protocol::NcclInitInfo worker;
  worker.master_address = params.master_address;
  worker.master_port = params.master_port;
  worker.rank_offset = 1;
  worker.world_size = params.world_size;
  engine->communicator_ = open_group_as_sender(client, worker, group, params.timeout);
  return engine;
}

std::unique_ptr<SparseTrainerEngine> SparseTrainerEngine::trainer_init(
    const SparseGlooTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  return open<SparseTrainerEngine>(info, info, SenderGroup{}, std::move(client), std::move(source));
}

std::unique_ptr<SparseNcclTrainerEngine> SparseNcclTrainerEngine::trainer_init(
    const SparseNcclTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  SenderGroup group{SenderGroup::Kind::kNccl, info.device, info.use_unique_id};
  return open<SparseNcclTrainerEngine>(info, info, group, std::move(client), std::move(source));
}

void SparseTrainerEngine::send_weights() {
  throw protocol::RuntimeError(
      "the sparse backend sends deltas: call send_weights(patches) with this round's patches");
}

void SparseTrainerEngine::send_weights(const std::vector<SparsePatch>& patches,
                                       const std::optional<std::string>& weight_version) {
  if (!is_sender()) return;
  validate_patches(patches);    // before any RPC
  if (patches.empty()) return;  // an empty round is a no-op
  if (!communicator_)
    throw protocol::RuntimeError("the transfer group is closed; call trainer_init again");
  std::vector<protocol::ParamMeta> meta;
  std::vector<std::int64_t> counts;
  for (const auto& p : patches) {
    meta.push_back({p.name, transport::from_scalar_type(p.values.scalar_type()), p.full_shape});
    counts.push_back(p.indices.numel());
  }
  nlohmann::json update_info = nlohmann::json::object();
  protocol::write_param_lists(meta, update_info);
  update_info["num_updates_list"] = counts;

  run_round(weight_version, [&] {
    auto shared_client = client_shared();
    AsyncCall update([shared_client, update_info] { shared_client->update_weights(update_info); });
    update.rethrow_if_failed();
    try {
      for (const auto& p : patches) {
        at::Tensor indices = p.indices.to(group_.tensor_device()).contiguous();
        at::Tensor values = p.values.to(group_.tensor_device()).contiguous();
        communicator_->broadcast(indices, 0, info_.timeout);
        communicator_->broadcast(values, 0, info_.timeout);
        reach_mid_update();
      }
    } catch (...) {
      communicator_->abort();  // never wait for the update call on the error path
      communicator_.reset();
      throw;
    }
    update.wait(info_.timeout, "update_weights");
  });
}

void SparseTrainerEngine::shutdown() {
  if (communicator_) communicator_->abort();
  communicator_.reset();
}

}  // namespace hotswap::trainer_sdk
