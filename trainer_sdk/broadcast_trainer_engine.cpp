#include "trainer_sdk/broadcast_trainer_engine.hpp"

#include <ATen/ops/empty.h>

#include "protocol/chunk_plan.hpp"
#include "trainer_sdk/async_call.hpp"
#include "trainer_sdk/round_hook.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {
namespace {

std::string describe(const std::string& name, const std::string& dtype,
                     const std::vector<std::int64_t>& shape) {
  return "'" + name + "' " + dtype + " " + protocol::shape_to_string(shape);
}

}  // namespace

protocol::NcclInitInfo BroadcastTransferParams::worker_init_info() const {
  protocol::NcclInitInfo info;
  info.master_address = master_address;
  info.master_port = master_port;
  info.rank_offset = 1;
  info.world_size = world_size;
  info.packing = protocol::PackingParams{packed, packed_buffer_size_bytes, packed_num_buffers};
  return info;
}

void pack_slice(at::Tensor& chunk, const protocol::ChunkSlice& slice, const at::Tensor& tensor) {
  if (slice.size == 0) return;
  chunk.narrow(0, static_cast<std::int64_t>(slice.offset), static_cast<std::int64_t>(slice.size))
      .copy_(tensor.contiguous().view({-1}).view(at::kByte));
}

at::Tensor CheckedStream::next() {
  auto item = stream_->next();
  if (!item) {
    throw protocol::ValueError("WeightSource yielded " + std::to_string(sent_) +
                               " parameters but metadata declared " + std::to_string(meta_.size()) +
                               "; the worker is waiting for the rest.");
  }
  if (sent_ >= meta_.size()) {
    throw protocol::ValueError("WeightSource yielded more parameters than metadata declared (" +
                               std::to_string(meta_.size()) + "); first extra is '" + item->name +
                               "'.");
  }
  const auto& expected = meta_[sent_];
  if (!item->held()) {
    throw protocol::ValueError("WeightSource yielded no tensor for '" + item->name +
                               "' on the sender, which must hold every parameter");
  }
  const at::Tensor& t = item->tensor;
  bool same_dtype = false;
  try {
    same_dtype = transport::from_scalar_type(t.scalar_type()) == expected.dtype;
  } catch (const protocol::ValueError&) {
  }
  if (item->name != expected.name || !same_dtype || t.sizes().vec() != expected.shape) {
    throw protocol::ValueError(
        "WeightSource metadata disagrees with iteration at index " + std::to_string(sent_) +
        ": declared " +
        describe(expected.name, std::string(protocol::dtype_name(expected.dtype)), expected.shape) +
        ", got " + describe(item->name, c10::toString(t.scalar_type()), t.sizes().vec()) +
        ". Both channels must enumerate the same parameters in the same order.");
  }
  ++sent_;
  return t.to(device_).contiguous();
}

void CheckedStream::finish() {
  if (sent_ != meta_.size()) {
    throw protocol::ValueError("WeightSource yielded " + std::to_string(sent_) +
                               " parameters but metadata declared " + std::to_string(meta_.size()) +
                               "; the worker is waiting for the rest.");
  }
  if (auto extra = stream_->next()) {
    throw protocol::ValueError("WeightSource yielded more parameters than metadata declared (" +
                               std::to_string(meta_.size()) + "); first extra is '" + extra->name +
                               "'.");
  }
}

BroadcastTrainerEngine::BroadcastTrainerEngine(std::shared_ptr<WeightSyncClient> client,
                                               std::shared_ptr<WeightSource> source,
                                               const BroadcastTransferParams& params,
                                               bool is_sender, SenderGroup group)
    : TrainerWeightTransferEngine(std::move(client), std::move(source), is_sender),
      info_(params),
      group_(group) {}

template <class Engine>
std::unique_ptr<Engine> BroadcastTrainerEngine::open(const TrainerInitInfo& info,
                                                     const BroadcastTransferParams& params,
                                                     SenderGroup group,
                                                     std::shared_ptr<WeightSyncClient> client,
                                                     std::shared_ptr<WeightSource> source) {
  if (!source) {
    throw protocol::ValueError(
        std::string(group.kind == SenderGroup::Kind::kGloo ? "Gloo" : "NCCL") +
        " trainer weight transfer requires a WeightSource.");
  }
  if (params.world_size < 2) {
    throw protocol::ValueError("world_size must count this trainer and at least one worker, got " +
                               std::to_string(params.world_size));
  }
  auto engine = std::make_unique<Engine>(client, source, params, info.is_sender(), group);
  if (!engine->is_sender()) return engine;  // only rank 0 joins the transfer group
  engine->communicator_ =
      open_group_as_sender(client, params.worker_init_info(), group, params.timeout);
  return engine;
}

std::unique_ptr<BroadcastTrainerEngine> BroadcastTrainerEngine::trainer_init(
    const GlooTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  return open<BroadcastTrainerEngine>(info, info, SenderGroup{}, std::move(client),
                                      std::move(source));
}

std::unique_ptr<NcclTrainerEngine> NcclTrainerEngine::trainer_init(
    const NcclTrainerInitInfo& info, std::shared_ptr<WeightSyncClient> client,
    std::shared_ptr<WeightSource> source) {
  SenderGroup group{SenderGroup::Kind::kNccl, info.device, info.use_unique_id};
  return open<NcclTrainerEngine>(info, info, group, std::move(client), std::move(source));
}

void BroadcastTrainerEngine::send_weights() {
  WeightSource& src = *source();
  auto meta = src.metadata();  // every rank: it may be a collective
  if (!is_sender()) {
    iterate_without_sending();
    return;
  }
  if (!communicator_) {
    throw protocol::RuntimeError("the transfer group is closed; call trainer_init again");
  }
  nlohmann::json update_info = nlohmann::json::object();
  protocol::write_param_lists(meta, update_info);
  client().start_weight_update();
  reach(RoundPoint::kStarted);
  auto shared_client = client_shared();
  AsyncCall update([shared_client, update_info] { shared_client->update_weights(update_info); });
  // A request the worker rejected before any collective must not leave us blocked in one.
  update.rethrow_if_failed();
  try {
    transmit(meta);
  } catch (...) {
    // Never wait for the update call here: the worker is blocked in the matching collective.
    communicator_->abort();
    communicator_.reset();
    throw;
  }
  update.wait(info_.timeout, "update_weights");
  reach(RoundPoint::kBeforeFinish);
  client().finish_weight_update(round_version());
}

void BroadcastTrainerEngine::transmit(const std::vector<protocol::ParamMeta>& meta) {
  CheckedStream stream(source()->iter(), meta, group_.tensor_device());
  if (!info_.packed) {
    for (std::size_t i = 0; i < meta.size(); ++i) {
      at::Tensor t = stream.next();
      communicator_->broadcast(t, 0, info_.timeout);
      if (i == 0) reach(RoundPoint::kMidUpdate);
    }
    stream.finish();
    return;
  }
  auto plan =
      protocol::plan_nccl_chunks(meta, static_cast<std::uint64_t>(info_.packed_buffer_size_bytes));
  at::Tensor buffer;
  for (const auto& chunk : plan) {
    const auto bytes = static_cast<std::int64_t>(chunk.size_bytes);
    if (!buffer.defined() || buffer.numel() < bytes) {
      buffer = at::empty({std::max<std::int64_t>(bytes, info_.packed_buffer_size_bytes)},
                         at::TensorOptions().dtype(at::kByte).device(group_.tensor_device()));
    }
    at::Tensor send = buffer.narrow(0, 0, bytes);
    for (const auto& slice : chunk.slices)
      pack_slice(send, slice, stream.next());
    communicator_->broadcast(send, 0, info_.timeout);
    if (&chunk == &plan.front()) reach(RoundPoint::kMidUpdate);
  }
  stream.finish();
}

void BroadcastTrainerEngine::shutdown() {
  if (communicator_) communicator_->abort();
  communicator_.reset();
}

}  // namespace hotswap::trainer_sdk
