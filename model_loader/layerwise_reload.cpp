#include "model_loader/layerwise_reload.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <algorithm>
#include <mutex>
#include <utility>

#include "model_loader/checkpoint.hpp"
#include "model_loader/int8_quantization.hpp"
#include "model_loader/parallel_read.hpp"
#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"
#include "transport/byte_copy.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::model_loader {

UpdateMode update_mode_from_name(std::string_view name) {
  if (name == "staged") return UpdateMode::kStaged;
  if (name == "inplace") return UpdateMode::kInplace;
  throw protocol::ValueError("unknown update mode '" + std::string(name) +
                             "' (expected staged or inplace)");
}

LayerwiseReload::LayerwiseReload(ParameterStore& store, UpdateMode mode)
    : store_(store),
      mode_(mode),
      received_(store.mapping().slots().size(), false),
      shadow_(store.mapping().runtime_params().size()),
      staging_(store.mapping().runtime_params().size()) {}

const CheckpointSlot* LayerwiseReload::slot_for(const std::string& name) const {
  const auto& mapping = store_.mapping();
  if (mapping.is_skipped(name)) return nullptr;
  const CheckpointSlot* slot = mapping.find(name);
  if (slot == nullptr) {
    throw protocol::ValueError("unknown checkpoint tensor '" + name +
                               "': the model has no parameter it maps to");
  }
  return slot;
}

std::size_t LayerwiseReload::checked_slot(const CheckpointSlot& slot, at::IntArrayRef shape,
                                          at::ScalarType dtype) const {
  if (shape.vec() != slot.shape) {
    throw protocol::ValueError("checkpoint tensor '" + slot.name + "' has shape " +
                               protocol::shape_to_string(shape.vec()) + " but the model's is " +
                               protocol::shape_to_string(slot.shape));
  }
  if (!at::isFloatingType(dtype)) {
    throw protocol::ValueError("checkpoint tensor '" + slot.name + "' has dtype " +
                               std::string(c10::toString(dtype)) +
                               "; weights must be floating point");
  }
  return static_cast<std::size_t>(&slot - store_.mapping().slots().data());
}

void LayerwiseReload::load(const std::vector<NamedTensor>& weights) {
  std::vector<std::pair<std::size_t, const at::Tensor*>> writes;
  writes.reserve(weights.size());
  for (const auto& [name, tensor] : weights) {
    const CheckpointSlot* slot = slot_for(name);
    if (slot == nullptr) continue;
    if (!tensor.defined()) throw protocol::ValueError("checkpoint tensor '" + name + "' is empty");
    writes.emplace_back(checked_slot(*slot, tensor.sizes(), tensor.scalar_type()), &tensor);
  }
  for (const auto& [slot, tensor] : writes)
    write_slot(slot, *tensor);
}

void LayerwiseReload::load(const Checkpoint& checkpoint, int threads) {
  // Every tensor is checked from the headers before any byte is read.
  std::vector<std::pair<std::size_t, const std::string*>> slots;
  slots.reserve(checkpoint.names().size());
  for (const auto& name : checkpoint.names()) {
    const CheckpointSlot* slot = slot_for(name);
    if (slot == nullptr) continue;
    const auto& info = checkpoint.info(name);
    slots.emplace_back(checked_slot(*slot, info.shape, transport::to_scalar_type(info.dtype)),
                       &name);
  }
  // Tensors already in the storage's dtype and layout are read straight into their rows, all
  // at once; the rest (a dtype to convert, an int8 parameter to quantize) go through write_slot.
  std::vector<FileRead> reads;
  std::vector<std::size_t> direct;
  std::vector<std::pair<std::size_t, const std::string*>> converted;
  std::unique_lock<std::shared_mutex> live_lock;
  for (const auto& [slot_index, name] : slots) {
    const auto& slot = store_.mapping().slots()[slot_index];
    const auto& info = checkpoint.info(*name);
    // A rank's rows of a tensor split by rows are one byte range of the file; a split by
    // columns is read through the mapping, which touches only the pages of the columns kept.
    if (store_.quantized(slot.param) || !store_.device().is_cpu() ||
        transport::to_scalar_type(info.dtype) != store_.dtype() || info.nbytes() == 0 ||
        slot.shard.dim > 0) {
      converted.emplace_back(slot_index, name);
      continue;
    }
    at::Tensor rows;
    if (mode_ == UpdateMode::kStaged) {
      rows = slot_rows(shadow_of(slot.param), slot);
    } else {
      if (!live_lock.owns_lock()) live_lock = std::unique_lock(store_.mutex());
      rows = slot_rows(store_[slot.param].value, slot);
      wrote_live_ = true;
    }
    std::uint64_t begin = info.begin;
    if (slot.shard.dim == 0) {
      begin += static_cast<std::uint64_t>(slot.shard.start) * (info.nbytes() / slot.shape[0]);
    }
    reads.push_back({checkpoint.file_of(*name), begin, static_cast<std::uint8_t*>(rows.data_ptr()),
                     rows.nbytes()});
    direct.push_back(slot_index);
  }
  read_in_parallel(reads, threads);
  if (live_lock.owns_lock()) live_lock.unlock();
  for (std::size_t slot_index : direct)
    note_received(slot_index);
  for (const auto& [slot_index, name] : converted)
    write_slot(slot_index, checkpoint.tensor(*name));
}

void LayerwiseReload::write_slot(std::size_t slot_index, const at::Tensor& tensor) {
  const auto& slot = store_.mapping().slots()[slot_index];
  const std::size_t p = slot.param;
  auto rows_of = [&](const at::Tensor& full) { return slot_rows(full, slot); };
  const at::Tensor kept = kept_part(tensor, slot);

  if (store_.quantized(p)) {
    if (!staging_[p].defined()) {
      staging_[p] = at::empty(store_.mapping().runtime_params()[p].shape,
                              at::TensorOptions().dtype(store_.dtype()).device(store_.device()));
    }
    transport::copy_tensor(rows_of(staging_[p]), kept);
  } else if (mode_ == UpdateMode::kStaged) {
    transport::copy_tensor(rows_of(shadow_of(p)), kept);
  } else {
    std::unique_lock lock(store_.mutex());
    transport::copy_tensor(rows_of(store_[p].value), kept);
    wrote_live_ = true;
  }

  note_received(slot_index);
}

at::Tensor& LayerwiseReload::shadow_of(std::size_t p) {
  // Uninitialized: rows this round does not deliver are filled from the live tensor at commit,
  // so a full update copies each byte once instead of cloning the model first.
  if (!shadow_[p]) shadow_[p] = RuntimeTensor{store_.take_spare(p), {}};
  return shadow_[p]->value;
}

std::optional<at::Tensor> LayerwiseReload::destination(const std::string& name,
                                                       at::ScalarType dtype,
                                                       at::IntArrayRef shape) {
  const auto& mapping = store_.mapping();
  if (mode_ != UpdateMode::kStaged || mapping.is_skipped(name)) return std::nullopt;
  const CheckpointSlot* slot = mapping.find(name);
  // A sharded slot keeps part of what arrives: the whole tensor has nowhere to land.
  if (slot == nullptr || shape.vec() != slot->shape || dtype != store_.dtype() ||
      store_.quantized(slot->param) || !slot->shard.whole()) {
    return std::nullopt;
  }
  return slot_rows(shadow_of(slot->param), *slot);
}

std::optional<at::Tensor> LayerwiseReload::contiguous_destination(
    const std::vector<protocol::ParamMeta>& tensors, std::uint64_t scratch_limit) {
  if (mode_ != UpdateMode::kStaged || tensors.empty() ||
      std::any_of(shadow_.begin(), shadow_.end(), [](const auto& s) { return s.has_value(); })) {
    return std::nullopt;
  }
  const auto& mapping = store_.mapping();
  const auto& runtime = mapping.runtime_params();
  const auto item = static_cast<std::int64_t>(c10::elementSize(store_.dtype()));
  // Each tensor's slot and first byte on the wire; every one must have a destination(), once.
  std::vector<std::size_t> slots;
  std::vector<std::int64_t> starts;
  std::vector<std::size_t> per_param(runtime.size(), 0);
  std::vector<bool> seen(mapping.slots().size(), false);
  std::int64_t wire = 0;
  for (const auto& t : tensors) {
    const CheckpointSlot* slot = mapping.is_skipped(t.name) ? nullptr : mapping.find(t.name);
    if (slot == nullptr || transport::to_scalar_type(t.dtype) != store_.dtype() ||
        t.shape != slot->shape || store_.quantized(slot->param) || !slot->shard.whole()) {
      return std::nullopt;
    }
    const auto index = static_cast<std::size_t>(slot - mapping.slots().data());
    if (seen[index]) return std::nullopt;
    seen[index] = true;
    ++per_param[slot->param];
    slots.push_back(index);
    starts.push_back(wire);
    wire += static_cast<std::int64_t>(t.nbytes());
  }
  // A parameter is its own part of the slab when all of its tensors here follow one another in
  // row order and fill it (q, k, v of a fused qkv_proj, in that order). The others (the same
  // three in name order, say: k, o, q, v) get a shadow of their own, and each of their tensors
  // is copied there from the slab once it has arrived (mark_received).
  std::vector<std::size_t> in_place;  // the first tensor of each such parameter
  std::vector<std::int64_t> in_place_bytes;
  std::vector<bool> scattered(slots.size(), false);
  std::uint64_t scratch_bytes = 0;
  for (std::size_t i = 0, j = 0; i < slots.size(); i = j) {
    const std::size_t p = mapping.slots()[slots[i]].param;
    // Where each tensor's rows lie in the parameter, as slot_rows has them: a tensor without
    // storage (the meta device) of the parameter's shape.
    const at::Tensor layout =
        at::empty(runtime[p].shape, at::TensorOptions().dtype(store_.dtype()).device(c10::kMeta));
    const std::int64_t numel = layout.numel();
    bool follows = true;
    for (j = i; j < slots.size() && mapping.slots()[slots[j]].param == p; ++j) {
      const std::int64_t offset =
          slot_rows(layout, mapping.slots()[slots[j]]).storage_offset() * item;
      follows = follows && starts[i] + offset == starts[j];
    }
    const std::int64_t end = j < slots.size() ? starts[j] : wire;
    // On a cache line, as every tensor the store allocates is: the kernels' loads stay aligned.
    if (follows && j - i == per_param[p] && end - starts[i] == numel * item &&
        starts[i] % kParamAlignment == 0) {
      in_place.push_back(i);
      in_place_bytes.push_back(numel * item);
    } else {
      std::fill(scattered.begin() + static_cast<std::ptrdiff_t>(i),
                scattered.begin() + static_cast<std::ptrdiff_t>(j), true);
      scratch_bytes += static_cast<std::uint64_t>(end - starts[i]);
    }
  }
  // Scratch is held beside those parameters' own shadows: past the caller's limit (the receive
  // buffers the slab replaces) the slab would cost memory instead of saving it.
  if (scratch_bytes > scratch_limit) return std::nullopt;

  std::vector<std::size_t> params;
  for (std::size_t i : in_place)
    params.push_back(mapping.slots()[slots[i]].param);
  slab_ = store_.take_spare_slab(wire, params);
  for (std::size_t k = 0; k < in_place.size(); ++k) {
    const std::size_t i = in_place[k];
    const std::size_t p = mapping.slots()[slots[i]].param;
    shadow_[p] = RuntimeTensor{
        slab_.narrow(0, starts[i], in_place_bytes[k]).view(store_.dtype()).view(runtime[p].shape),
        {}};
  }
  scratch_.assign(mapping.slots().size(), at::Tensor());
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (!scattered[i]) continue;
    scratch_[slots[i]] = slab_.narrow(0, starts[i], static_cast<std::int64_t>(tensors[i].nbytes()))
                             .view(store_.dtype())
                             .view(tensors[i].shape);
  }
  return slab_;
}

void LayerwiseReload::mark_received(const std::string& name) {
  const auto& mapping = store_.mapping();
  const CheckpointSlot* slot = mapping.find(name);
  const auto index =
      slot == nullptr ? scratch_.size() : static_cast<std::size_t>(slot - mapping.slots().data());
  if (index < scratch_.size() && scratch_[index].defined()) {
    write_slot(index, std::exchange(scratch_[index], {}));  // into its parameter's own shadow
    return;
  }
  if (slot == nullptr || mode_ != UpdateMode::kStaged || !shadow_[slot->param]) {
    throw protocol::RuntimeError("mark_received('" + name + "') without a destination for it");
  }
  note_received(index);
}

void LayerwiseReload::note_received(std::size_t slot_index) {
  const std::size_t p = store_.mapping().slots()[slot_index].param;
  if (!received_[slot_index]) {
    received_[slot_index] = true;
    ++received_count_;
  }
  if (store_.quantized(p)) {
    const auto& siblings = store_.mapping().slots_of_param(p);
    if (std::all_of(siblings.begin(), siblings.end(),
                    [&](std::size_t s) { return received_[s]; })) {
      process_param(p);
    }
  }
}

void LayerwiseReload::process_param(std::size_t p) {
  // The staging copy stays until the session ends, so a tensor delivered again later in the
  // same session re-quantizes from complete rows.
  QuantizedWeight q = quantize_int8_per_channel(staging_[p]);
  if (mode_ == UpdateMode::kStaged) {
    shadow_[p] = RuntimeTensor{q.values, q.scale};
  } else {
    std::unique_lock lock(store_.mutex());
    store_[p].value.copy_(q.values);
    store_[p].scale.copy_(q.scale);
    wrote_live_ = true;
  }
}

bool LayerwiseReload::received_everything() const {
  return received_count_ == received_.size();
}

std::vector<std::string> LayerwiseReload::missing_names(bool require_complete) const {
  const auto& mapping = store_.mapping();
  std::vector<std::string> missing;
  // What a round leaves out keeps its old values where they are held exactly: in full
  // precision, or an int8 parameter the round did not touch at all. An int8 parameter it
  // touched in part (q_proj without k_proj) is re-quantized from rows whose old values are gone,
  // so the rest must come too.
  std::vector<bool> touched(mapping.runtime_params().size(), false);
  for (std::size_t s = 0; s < received_.size(); ++s) {
    if (received_[s]) touched[mapping.slots()[s].param] = true;
  }
  for (int g = 0; g < mapping.num_groups(); ++g) {
    for (std::size_t s : mapping.slots_of_group(g)) {
      if (received_[s]) continue;
      const std::size_t p = mapping.slots()[s].param;
      if (require_complete || (touched[p] && store_.quantized(p))) {
        missing.push_back(mapping.slots()[s].name);
      }
    }
  }
  return missing;
}

void LayerwiseReload::finish(bool require_complete) {
  auto missing = missing_names(require_complete);
  if (!missing.empty()) {
    abort();
    std::string list;
    for (std::size_t i = 0; i < missing.size() && i < 8; ++i) {
      list += (i ? ", " : "") + missing[i];
    }
    if (missing.size() > 8) list += ", and " + std::to_string(missing.size() - 8) + " more";
    throw protocol::ValueError(
        require_complete
            ? "the checkpoint is missing " + std::to_string(missing.size()) + " tensors: " + list
            : "the update delivered only part of a fused tensor whose runtime storage is "
              "int8-quantized, so the old values of the rest cannot be kept; missing " +
                  list);
  }
  if (mode_ == UpdateMode::kStaged) {
    // Rows of an unquantized parameter that this round left alone keep their old values.
    const auto& mapping = store_.mapping();
    for (std::size_t p = 0; p < shadow_.size(); ++p) {
      if (!shadow_[p] || store_.quantized(p)) continue;
      for (std::size_t s : mapping.slots_of_param(p)) {
        if (received_[s]) continue;
        const auto& slot = mapping.slots()[s];
        std::shared_lock lock(store_.mutex());
        transport::copy_tensor(slot_rows(shadow_[p]->value, slot),
                               slot_rows(store_[p].value, slot));
      }
    }
    std::unique_lock lock(store_.mutex());
    for (std::size_t p = 0; p < shadow_.size(); ++p) {
      if (!shadow_[p]) continue;
      // The replaced tensor becomes the next round's shadow: no fresh pages every round.
      at::Tensor old = std::exchange(store_[p].value, std::move(shadow_[p]->value));
      if (!store_.quantized(p)) store_.set_spare(p, std::move(old));
      if (shadow_[p]->scale.defined()) store_[p].scale = std::move(shadow_[p]->scale);
    }
  }
  abort();  // releases the shadows (now empty) and staging
}

void LayerwiseReload::abort() {
  for (auto& s : shadow_)
    s.reset();
  for (auto& s : staging_)
    s = at::Tensor();
  scratch_.clear();
  if (slab_.defined()) store_.keep_slab(std::exchange(slab_, {}));
}

}  // namespace hotswap::model_loader
