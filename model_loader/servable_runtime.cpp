#include "model_loader/servable_runtime.hpp"

#include <ATen/Parallel.h>
#include <ATen/TensorIndexing.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/_unique.h>
#include <ATen/ops/floor_divide.h>
#include <ATen/ops/zeros.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <thread>

#include "model_loader/kv_cache_budget.hpp"
#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"
#include "transport/communicator.hpp"
#include "transport/device.hpp"
#include "transport/tensor_digest.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::model_loader {
namespace {

TensorParallelRank rank_in(const ModelOptions& options) {
  if (!options.tensor_parallel_group) return {};
  return {options.tensor_parallel_group->rank(), options.tensor_parallel_group->world_size(),
          options.enable_expert_parallel};
}

}  // namespace

ServableRuntime::ServableRuntime(ModelConfig config, ModelOptions options, MappingRule mapping_rule)
    : config_(std::move(config)),
      options_(std::move(options)),
      tp_(rank_in(options_)),
      mapping_(mapping_rule(config_, tp_)),
      store_(mapping_, transport::to_scalar_type(options_.dtype.value_or(config_.torch_dtype)),
             options_.device, options_.quantize_int8) {
  auto runtime = options_.dtype.value_or(config_.torch_dtype);
  if (!protocol::is_floating_point(runtime) || protocol::item_size(runtime) < 2) {
    throw protocol::ValueError("runtime dtype " + std::string(protocol::dtype_name(runtime)) +
                               " is not supported (float32, bfloat16 and float16 are)");
  }
  // libtorch starts with one thread on some machines; generation should use every core, shared
  // between the tensor-parallel ranks of this host.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  at::set_num_threads(std::max(1, cores / tp_.size));
}

std::shared_ptr<KvBlockPool> ServableRuntime::make_kv_pool(const KvBlockShape& shape,
                                                           std::uint64_t kernel_path_bytes) const {
  auto blocks = [&](std::uint64_t bytes) {
    return static_cast<std::int64_t>(bytes / std::max<std::uint64_t>(1, shape.block_bytes()));
  };
  const c10::Device& device = store_.device();
  if (!device.is_cuda() || !options_.gpu_kv_cache) {
    return std::make_shared<KvBlockPool>(
        shape, blocks(options_.kv_cache_memory_bytes),
        "KV cache " + gibibytes(options_.kv_cache_memory_bytes) + " (--kv-cache-memory-bytes)");
  }
  const auto& sizing = *options_.gpu_kv_cache;
  const auto now = transport::device_memory(device);
  GpuMemoryShares shares;
  shares.total = now.total;
  shares.free = now.free;
  shares.weights = store_.nbytes();
  shares.staged_shadow = options_.update_mode == UpdateMode::kStaged ? store_.nbytes() : 0;
  shares.activations = estimate_step_activation_bytes(
      config_, sizing.max_num_batched_tokens, sizing.max_num_seqs,
      static_cast<std::int64_t>(c10::elementSize(shape.options.dtype().toScalarType())));
  shares.cuda_graphs = kernel_path_bytes;
  const std::uint64_t one_sequence =
      static_cast<std::uint64_t>((config_.max_position_embeddings + shape.block_size - 1) /
                                 shape.block_size) *
      shape.block_bytes();
  const KvCacheBudget budget = gpu_kv_cache_budget(shares, sizing.gpu_memory_utilization,
                                                   one_sequence, config_.max_position_embeddings);
  auto pool = std::make_shared<KvBlockPool>(shape, blocks(budget.bytes), budget.shares);
  pool->allocate_all();
  return pool;
}

std::size_t ServableRuntime::param(const std::string& runtime_name) const {
  return mapping_.param_index(runtime_name);
}

template <typename Load>
void ServableRuntime::load_into_session(Load&& load) {
  if (!reload_) {
    throw protocol::RuntimeError("load_weights called outside a weight reload; start one first");
  }
  try {
    load();
  } catch (...) {
    if (reload_->wrote_live()) dirty_ = true;
    throw;
  }
  if (reload_->wrote_live()) dirty_ = true;
}

// ---- weights -------------------------------------------------------------------------------

void ServableRuntime::load_checkpoint(const Checkpoint& checkpoint) {
  std::lock_guard lock(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("cannot load a checkpoint during a weight update");
  LayerwiseReload session(store_, UpdateMode::kInplace);
  session.load(checkpoint, at::get_num_threads());
  note_checkpoint_dtypes(checkpoint);
  session.finish(/*require_complete=*/true);
  dirty_ = false;
}

void ServableRuntime::start_reload() {
  std::lock_guard lock(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("a weight reload is already active");
  reload_ = std::make_unique<LayerwiseReload>(store_, options_.update_mode);
  dirty_before_session_ = dirty_;
}

void ServableRuntime::load_weights(const std::vector<NamedTensor>& weights) {
  std::lock_guard lock(reload_mutex_);
  load_into_session([&] { reload_->load(weights); });
  for (const auto& [name, tensor] : weights) {
    if (mapping_.find(name) != nullptr) checkpoint_dtypes_[name] = tensor.scalar_type();
  }
}

void ServableRuntime::load_weights_from(const Checkpoint& checkpoint) {
  std::lock_guard lock(reload_mutex_);
  load_into_session([&] { reload_->load(checkpoint, at::get_num_threads()); });
  note_checkpoint_dtypes(checkpoint);
}

void ServableRuntime::note_checkpoint_dtypes(const Checkpoint& checkpoint) {
  for (const auto& name : checkpoint.names()) {
    if (mapping_.find(name) != nullptr) {
      checkpoint_dtypes_[name] = transport::to_scalar_type(checkpoint.info(name).dtype);
    }
  }
}

std::optional<at::Tensor> ServableRuntime::destination_for(const std::string& name,
                                                           c10::ScalarType dtype,
                                                           c10::IntArrayRef shape) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) return std::nullopt;  // load_weights will say why
  return reload_->destination(name, dtype, shape);
}

std::optional<at::Tensor> ServableRuntime::contiguous_destination(
    const std::vector<protocol::ParamMeta>& tensors, std::uint64_t scratch_limit) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) return std::nullopt;
  return reload_->contiguous_destination(tensors, scratch_limit);
}

void ServableRuntime::mark_received(const std::string& name) {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) throw protocol::RuntimeError("mark_received called outside a weight reload");
  reload_->mark_received(name);
  checkpoint_dtypes_[name] = store_.dtype();
}

void ServableRuntime::finish_reload() {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) throw protocol::RuntimeError("finish_reload called without an active reload");
  auto session = std::move(reload_);
  // A dirty model comes clean only from a session that delivered every tensor.
  bool cleans = !dirty_before_session_ || session->received_everything();
  try {
    session->finish(/*require_complete=*/false);
  } catch (...) {
    if (session->wrote_live()) dirty_ = true;
    throw;
  }
  if (session->mode() == UpdateMode::kInplace) dirty_ = !cleans;
}

void ServableRuntime::abort_reload() {
  std::lock_guard lock(reload_mutex_);
  if (!reload_) return;
  if (reload_->wrote_live()) dirty_ = true;
  reload_->abort();
  reload_.reset();
}

std::vector<ServableRuntime::ResolvedPatch> ServableRuntime::resolve_patches(
    const std::vector<WeightPatch>& patches) const {
  std::vector<ResolvedPatch> resolved;
  for (const auto& p : patches) {
    const CheckpointSlot* slot = mapping_.find(p.name);
    if (slot == nullptr) {
      throw protocol::ValueError("unknown checkpoint tensor '" + p.name + "' in a sparse patch");
    }
    if (!p.shape.empty() && p.shape != slot->shape) {
      throw protocol::ValueError(
          "sparse patch '" + p.name + "' declares shape " + protocol::shape_to_string(p.shape) +
          " but the checkpoint tensor's shape is " + protocol::shape_to_string(slot->shape));
    }
    if (store_.quantized(slot->param)) {
      throw protocol::ValueError("'" + p.name +
                                 "' is held int8-quantized; sparse patches need "
                                 "exact runtime storage");
    }
    if (p.indices.scalar_type() != at::kInt || p.indices.dim() != 1 || p.values.dim() != 1 ||
        p.indices.numel() != p.values.numel()) {
      throw protocol::ValueError("sparse patch '" + p.name +
                                 "' needs 1-D int32 indices and 1-D values of the same length");
    }
    if (!at::isFloatingType(p.values.scalar_type())) {
      throw protocol::ValueError("sparse patch '" + p.name + "' has non-floating values");
    }
    const std::int64_t numel = c10::multiply_integers(slot->shape);
    at::Tensor idx = p.indices.to(at::kLong);
    if (idx.numel() > 0) {
      bool in_range = idx.min().item<std::int64_t>() >= 0 && idx.max().item<std::int64_t>() < numel;
      bool unique = std::get<0>(at::_unique(idx)).numel() == idx.numel();
      bool finite = !p.values.isnan().any().item<bool>();
      if (!in_range || !unique || !finite) {
        throw protocol::ValueError(
            "sparse checkpoint patches contain NaN values, out-of-range "
            "indices, or duplicate indices ('" +
            p.name + "')");
      }
    }
    // Indices address the whole checkpoint tensor. A tensor-parallel rank applies those that
    // fall in its slice and ignores the rest, as vLLM's sharded loaders do; the slice is rows
    // [row_offset, row_offset + rows) of the runtime parameter, so its flat positions shift by
    // row_offset × the slice's row length.
    at::Tensor values = p.values;
    std::int64_t row_length = numel / slot->shape[0];
    if (!slot->shard.whole()) {
      const std::int64_t columns = row_length;
      at::Tensor row = at::floor_divide(idx, columns), column = idx - row * columns;
      const ShardRange& r = slot->shard;
      at::Tensor along = r.dim == 0 ? row : column;
      at::Tensor kept = (along >= r.start).logical_and(along < r.start + r.size);
      row = row.index({kept});
      column = column.index({kept});
      values = values.index({kept.to(values.device())});
      if (r.dim == 0) {
        idx = (row - r.start) * columns + column;
      } else {
        row_length = r.size;
        idx = row * r.size + (column - r.start);
      }
    }
    resolved.push_back({slot, idx + slot->row_offset * row_length, values});
  }
  return resolved;
}

void ServableRuntime::check_patches(const std::vector<WeightPatch>& patches) const {
  resolve_patches(patches);
}

void ServableRuntime::apply_patches(const std::vector<WeightPatch>& patches) {
  // Everything is checked before anything is written: a bad patch loses nothing.
  const auto resolved = resolve_patches(patches);
  std::lock_guard reload(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("cannot apply sparse patches during a weight reload");
  std::unique_lock lock(store_.mutex());  // between two generation steps
  for (auto& r : resolved) {
    at::Tensor flat = store_[r.slot->param].value.view({-1});
    flat.index_put_({r.runtime_indices.to(flat.device())},
                    r.values.to(flat.scalar_type()).to(flat.device()));
    checkpoint_dtypes_[r.slot->name] = checkpoint_dtypes_.count(r.slot->name)
                                           ? checkpoint_dtypes_[r.slot->name]
                                           : r.values.scalar_type();
  }
}

bool ServableRuntime::reload_active() const {
  std::lock_guard lock(reload_mutex_);
  return reload_ != nullptr;
}

bool ServableRuntime::is_dirty() const {
  return dirty_;
}

void ServableRuntime::all_reduce(at::Tensor& t) const {
  queue_all_reduce(t);
  finish_collectives();
}

void ServableRuntime::queue_all_reduce(at::Tensor& t) const {
  if (tp_.size == 1) return;
  auto& group = *options_.tensor_parallel_group;
  // Partial sums travel as float32 (half types widen exactly) and are rounded once, after the
  // sum. Over NCCL they stay on the device; gloo reduces host memory, so a GPU shard's go
  // through the host there.
  const bool widen = t.scalar_type() != at::kFloat && t.scalar_type() != at::kDouble;
  at::Tensor wire = t;
  if (group.device_type() == c10::DeviceType::CPU && !t.device().is_cpu()) wire = wire.to(at::kCPU);
  if (widen) wire = wire.to(at::kFloat);
  wire = wire.contiguous();
  group.queue_all_reduce_sum(wire, options_.collective_timeout);
  // Queued after the collective on the caller's stream when the sum is still on its way.
  if (!wire.is_same(t)) t.copy_(wire);
}

void ServableRuntime::finish_collectives() const {
  if (tp_.size == 1) return;
  options_.tensor_parallel_group->wait_queued(options_.collective_timeout);
}

void ServableRuntime::zero_weights() {
  std::lock_guard reload(reload_mutex_);
  if (reload_) throw protocol::RuntimeError("cannot reset weights during a weight update");
  std::unique_lock lock(store_.mutex());
  for (std::size_t i = 0; i < mapping_.runtime_params().size(); ++i) {
    store_[i].value.zero_();
    if (store_[i].scale.defined()) store_[i].scale.zero_();
  }
}

std::map<std::string, std::string> ServableRuntime::runtime_checksums(
    const std::string& key_prefix_template) const {
  std::string key_prefix = key_prefix_template;
  if (auto at = key_prefix.find("{tp}"); at != std::string::npos) {
    key_prefix.replace(at, 4, std::to_string(tp_.rank));
  }
  std::shared_lock lock(store_.mutex());
  std::map<std::string, std::string> out;
  const auto& params = mapping_.runtime_params();
  for (std::size_t i = 0; i < params.size(); ++i) {
    out[key_prefix + params[i].name] = transport::sha256_hex(store_[i].value);
    if (store_[i].scale.defined()) {
      out[key_prefix + params[i].name + "_scale"] = transport::sha256_hex(store_[i].scale);
    }
  }
  return out;
}

std::map<std::string, std::string> ServableRuntime::checkpoint_checksums() const {
  if (store_.quantize_int8()) {
    throw protocol::ValueError(
        "checkpoint-format checksums need exact runtime storage, but this model's linear "
        "weights are int8-quantized (lossy); compare runtime checksums instead");
  }
  std::map<std::string, c10::ScalarType> dtypes;
  {
    std::lock_guard lock(reload_mutex_);
    dtypes = checkpoint_dtypes_;
  }
  std::shared_lock lock(store_.mutex());
  std::map<std::string, std::string> out;
  for (const auto& slot : mapping_.slots()) {
    at::Tensor rows = slot_rows(store_[slot.param].value, slot);
    if (!slot.shard.whole()) {
      // The ranks put the tensor back together: each places its slice (the first of the
      // ranks holding a replicated one), zeros elsewhere, and the sum is exact.
      at::Tensor whole = at::zeros(slot.shape, rows.options());
      if (slot.shard.primary) {
        whole.narrow(slot.shard.dim, slot.shard.start, slot.shard.size).copy_(rows);
      }
      all_reduce(whole);
      rows = whole;
    }
    auto it = dtypes.find(slot.name);
    c10::ScalarType dtype =
        it != dtypes.end() ? it->second : transport::to_scalar_type(config_.torch_dtype);
    out[slot.name] = transport::sha256_hex(rows.to(dtype));
  }
  return out;
}

}  // namespace hotswap::model_loader
