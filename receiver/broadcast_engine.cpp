#include "receiver/broadcast_engine.hpp"

#include <ATen/ops/empty.h>

#include <future>

#include "protocol/chunk_plan.hpp"
#include "transport/byte_copy.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/receive_pipeline.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::receiver {

BroadcastWeightTransferEngine::BroadcastWeightTransferEngine(EngineContext context,
                                                             std::string name,
                                                             CommunicatorFactory factory)
    : TypedWeightTransferEngine(std::move(context)),
      name_(std::move(name)),
      factory_(std::move(factory)) {}

void BroadcastWeightTransferEngine::init_transfer_channel(const protocol::NcclInitInfo& info) {
  const int rank = static_cast<int>(info.rank_offset) + context().parallel.global_rank();
  if (rank >= info.world_size) {
    throw protocol::ValueError("this worker's rank " + std::to_string(rank) + " (rank_offset " +
                               std::to_string(info.rank_offset) + " + inference rank " +
                               std::to_string(context().parallel.global_rank()) +
                               ") is outside world_size " + std::to_string(info.world_size));
  }
  if (communicator_) communicator_->abort();  // a re-init replaces the old group
  communicator_.reset();
  buffers_.clear();
  last_params_.clear();
  load_plan_.reset();
  communicator_ = factory_(info, rank, context().timeout);
  packing_ = info.packing;
  broadcasters_ = info.rank_offset;
  if (info.use_load_plan) load_plan_ = info.metadata;
}

void BroadcastWeightTransferEngine::start_weight_update() {
  model().start_reload();
}

void BroadcastWeightTransferEngine::finish_weight_update() {
  model().finish_reload();
}

void BroadcastWeightTransferEngine::shutdown() {
  if (communicator_) communicator_->abort();
  communicator_.reset();
  buffers_.clear();
}

void BroadcastWeightTransferEngine::receive_weights(const protocol::NcclUpdateInfo& update_info) {
  if (!communicator_) {
    throw protocol::RuntimeError(std::string(name_.substr(0, name_.find("Weight"))) +
                                 " weight transfer not initialized. Call init_transfer_engine() "
                                 "first.");
  }
  auto packing = update_info.packing(packing_);
  protocol::check_update_src(update_info.src, broadcasters_);
  if (load_plan_) protocol::check_against_load_plan(*load_plan_, update_info.params);
  // vLLM's trainer sends empty lists when the metadata is the previous round's from that src.
  if (!update_info.params.empty()) last_params_[update_info.src] = update_info.params;
  const auto& params = last_params_[update_info.src];
  const int root = static_cast<int>(update_info.src);
  try {
    if (packing.packed) {
      receive_packed(params, root, packing);
    } else {
      receive_unpacked(params, root);
    }
  } catch (const protocol::Error& e) {
    // A collective that failed part-way leaves the group out of step: tear it down so the next
    // init_weight_transfer_engine starts clean.
    if (e.kind() == protocol::ErrorKind::kTransferError ||
        e.kind() == protocol::ErrorKind::kTimeoutError) {
      shutdown();
    }
    throw;
  }
}

void BroadcastWeightTransferEngine::receive_unpacked(const std::vector<protocol::ParamMeta>& params,
                                                     int root) {
  // The next tensor's receive is posted while this one's bytes arrive (transport/
  // receive_pipeline.hpp); each is marked received or loaded once it is whole, in order.
  transport::ReceivePipeline pipeline(*communicator_, context().timeout);
  for (std::size_t i = 0; i < params.size(); ++i) {
    const auto& p = params[i];
    const auto type = transport::to_scalar_type(p.dtype);
    // Straight into the model's staged copy where it can take the bytes as they are: no
    // receive buffer, no second copy. Otherwise a buffer, and the model converts on load.
    if (auto destination = model().destination_for(p.name, type, p.shape)) {
      pipeline.receive(*destination, root, [this, &p] {
        model().mark_received(p.name);
        add_bytes_received(p.nbytes());
      });
    } else {
      at::Tensor tensor = at::empty(p.shape, at::TensorOptions().dtype(type).device(device()));
      pipeline.receive(tensor, root, [this, &p, tensor] {
        model().load_weights({{p.name, tensor}});
        add_bytes_received(p.nbytes());
      });
    }
  }
  pipeline.finish();
}

void BroadcastWeightTransferEngine::receive_packed(const std::vector<protocol::ParamMeta>& params,
                                                   int root,
                                                   const protocol::PackingParams& packing) {
  auto plan = protocol::plan_nccl_chunks(
      params, static_cast<std::uint64_t>(packing.packed_buffer_size_bytes));
  // Where the model's staged copies can lie as the wire lays the tensors out, the chunks land
  // there: no receive buffers (vLLM's default is two of 1 GiB, on the GPU), and no copy out of
  // them but for the tensors the model must place elsewhere.
  const auto ring_bytes = static_cast<std::uint64_t>(packing.packed_num_buffers) *
                          static_cast<std::uint64_t>(packing.packed_buffer_size_bytes);
  if (auto destination = model().contiguous_destination(params, ring_bytes)) {
    receive_packed_in_place(params, root, plan, *destination);
    return;
  }
  const auto ring = static_cast<std::size_t>(packing.packed_num_buffers);
  if (buffers_.size() != ring) buffers_.assign(ring, at::Tensor());
  // On the CPU, chunk k is unpacked (the model's copy into its rows) on a helper thread while
  // chunk k+1 arrives in the next buffer of the ring; serially, every copy stalled the
  // broadcast. On a GPU the copies are queued on the device and overlap by themselves. Chunk
  // k+1's receive is posted as soon as its buffer is free, before chunk k has landed
  // (transport/receive_pipeline.hpp).
  const bool overlap = device().is_cpu() && ring > 1;
  std::future<void> unpacking;  // the latest chunk's; std::async's joins on every exit
  auto join_unpacking = [&unpacking] {
    if (unpacking.valid()) unpacking.get();  // that chunk's error, if it had one
  };
  transport::ReceivePipeline pipeline(*communicator_, context().timeout);
  for (std::size_t c = 0; c < plan.size(); ++c) {
    const auto& chunk = plan[c];
    // This buffer last held chunk c - ring: it must have landed and been unpacked.
    pipeline.drain_to(ring - 1);
    if (c >= ring) join_unpacking();
    at::Tensor& buffer = buffers_[c % ring];
    const auto bytes = static_cast<std::int64_t>(chunk.size_bytes);
    // A chunk may exceed the buffer size by its last tensor; grow the slot once, keep it.
    if (!buffer.defined() || buffer.numel() < bytes) {
      buffer = at::empty({std::max<std::int64_t>(bytes, packing.packed_buffer_size_bytes)},
                         at::TensorOptions().dtype(at::kByte).device(device()));
    }
    at::Tensor received = buffer.narrow(0, 0, bytes);
    pipeline.receive(
        received, root, [this, &params, &chunk, &unpacking, &join_unpacking, overlap, received] {
          add_bytes_received(chunk.size_bytes);
          join_unpacking();
          if (overlap) {
            unpacking = std::async(std::launch::async, [this, &params, &chunk, received] {
              unpack(params, chunk, received);
            });
          } else {
            unpack(params, chunk, received);
          }
        });
  }
  pipeline.finish();
  join_unpacking();
}

void BroadcastWeightTransferEngine::receive_packed_in_place(
    const std::vector<protocol::ParamMeta>& params, int root, const protocol::ChunkPlan& plan,
    const at::Tensor& destination) {
  transport::ReceivePipeline pipeline(*communicator_, context().timeout);
  std::int64_t start = 0;  // chunks hold consecutive tensors without padding: they follow on
  for (const auto& chunk : plan) {
    const auto bytes = static_cast<std::int64_t>(chunk.size_bytes);
    pipeline.receive(destination.narrow(0, start, bytes), root, [this, &params, &chunk] {
      for (const auto& slice : chunk.slices)
        model().mark_received(params[slice.param_index].name);
      add_bytes_received(chunk.size_bytes);
    });
    start += bytes;
  }
  pipeline.finish();
}

void BroadcastWeightTransferEngine::unpack(const std::vector<protocol::ParamMeta>& params,
                                           const protocol::Chunk& chunk,
                                           const at::Tensor& received) {
  std::vector<model_loader::NamedTensor> weights;
  weights.reserve(chunk.slices.size());
  for (const auto& slice : chunk.slices) {
    const auto& p = params[slice.param_index];
    const auto type = transport::to_scalar_type(p.dtype);
    at::Tensor raw = received.narrow(0, static_cast<std::int64_t>(slice.offset),
                                     static_cast<std::int64_t>(slice.size));
    at::Tensor tensor;
    if (slice.offset % protocol::item_size(p.dtype) == 0) {
      tensor = raw.view(type).view(p.shape);
    } else {
      // No padding on the wire: this slice starts misaligned for its dtype. Copy it out.
      tensor = at::empty(p.shape, at::TensorOptions().dtype(type).device(device()));
      transport::copy_tensor(tensor.view({-1}).view(at::kByte), raw);
    }
    weights.emplace_back(p.name, tensor);
  }
  model().load_weights(weights);  // the model copies: the buffer is free for the next chunk
}

BroadcastWeightTransferEngine::CommunicatorFactory gloo_communicator_factory() {
  return [](const protocol::NcclInitInfo& info, int rank,
            std::chrono::milliseconds timeout) -> std::unique_ptr<transport::Communicator> {
    if (info.uses_unique_id()) {
      throw protocol::ValueError(
          "the gloo backend rendezvouses through a TCPStore (master_address, master_port); "
          "nccl_unique_id_b64 is for NCCL");
    }
    return std::make_unique<transport::GlooCommunicator>(
        transport::GlooRendezvous{*info.master_address, static_cast<int>(*info.master_port), rank,
                                  static_cast<int>(info.world_size), timeout});
  };
}

std::unique_ptr<WeightTransferEngine> make_gloo_engine(const EngineContext& context) {
  return std::make_unique<BroadcastWeightTransferEngine>(context, "GlooWeightTransferEngine",
                                                         gloo_communicator_factory());
}

}  // namespace hotswap::receiver
