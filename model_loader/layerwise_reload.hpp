// LayerwiseReload: one weight-update session over a ParameterStore (vLLM's layerwise reload,
// start → loads → finish), in either of two modes:
//
// - staged: every touched runtime parameter gets a shadow (uninitialized, recycled from the
//   tensor the previous commit replaced; at commit, the rows a round did not deliver are copied
//   in from the live tensor, so they keep their old values); loads land in the shadow while
//   generation keeps reading the live tensors; finish swaps all shadows in at once. An error or
//   an abort drops the shadows: the live weights are untouched.
// - inplace: loads land in the live tensors (generation must be paused); a failure leaves the
//   model partly updated, which the model reports as dirty.
//
// Checkpoint tensors may arrive in any order and in any number of load calls. A quantized
// parameter is staged in the runtime dtype until all of its checkpoint tensors have arrived and
// is quantized right then (its layer's post-load processing). At finish, a layer that received
// nothing keeps its old weights; one that received part of its tensors keeps the old values of
// the rest where the runtime storage holds them exactly, and is otherwise an error naming the
// missing tensors (vLLM would copy uninitialized memory there; hotswap never does).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "model_loader/loadable_model.hpp"
#include "model_loader/parameter_store.hpp"
#include "protocol/param_meta.hpp"

namespace hotswap::model_loader {

class Checkpoint;

enum class UpdateMode { kStaged, kInplace };

UpdateMode update_mode_from_name(std::string_view name);  // "staged" | "inplace"

class LayerwiseReload {
 public:
  LayerwiseReload(ParameterStore& store, UpdateMode mode);

  // Validates every (name, tensor) of the call first (known name, matching shape, floating
  // dtype) and only then writes any byte. Tensors are copied: the caller may reuse its buffers.
  void load(const std::vector<NamedTensor>& weights);
  // Every tensor of `checkpoint`, checked as above from its headers before any byte is read;
  // those already in the storage's dtype are read from the files straight into their rows on
  // `threads` threads (see parallel_read.hpp), the rest converted or quantized as load() does.
  void load(const Checkpoint& checkpoint, int threads);

  // Staged sessions only: the shadow rows where checkpoint tensor `name` lands, to be filled in
  // place (by a receive) and then mark_received(name). nullopt where the tensor must go through
  // load(): an inplace session (live writes stay under the store's lock), a quantized
  // parameter, a name load() would refuse or skip, a dtype or shape unlike the storage's, or
  // a slot this tensor-parallel rank keeps only part of.
  std::optional<at::Tensor> destination(const std::string& name, at::ScalarType dtype,
                                        at::IntArrayRef shape);
  void mark_received(const std::string& name);
  // Staged sessions that have staged nothing yet: one byte tensor (a slab) where `tensors`,
  // laid end to end in this order with no padding (a packed transfer's chunks), can be received
  // in place. Where a runtime parameter's tensors follow one another in row order and fill it
  // (q, k, v of a fused qkv_proj, in that order), its part of the slab is its shadow; other
  // tensors land in the slab as scratch and mark_received copies each into its parameter's own
  // shadow. nullopt unless every tensor has a destination(), once, and the scratch takes at most
  // `scratch_limit` bytes. The caller marks each tensor received once its bytes are in; what is
  // not marked is discarded as usual.
  std::optional<at::Tensor> contiguous_destination(const std::vector<protocol::ParamMeta>& tensors,
                                                   std::uint64_t scratch_limit);

  // Processes what is pending, checks every touched layer, and (staged) commits. With
  // `require_complete`, every checkpoint tensor of the model must have arrived. Throws a
  // ValueError naming the missing tensors; in staged mode nothing was changed then.
  void finish(bool require_complete);

  // Drops whatever the session staged. Inplace writes already made stay made.
  void abort();

  UpdateMode mode() const { return mode_; }
  // Inplace: whether any live tensor has been written.
  bool wrote_live() const { return wrote_live_; }
  // Whether every checkpoint tensor of the model arrived in this session.
  bool received_everything() const;
  std::size_t received_count() const { return received_count_; }

 private:
  // The slot checkpoint tensor `name` fills; null for a name the model skips, a ValueError
  // naming it for one the model does not know.
  const CheckpointSlot* slot_for(const std::string& name) const;
  // `slot`'s index, once a tensor of `shape` and `dtype` is checked to fit it (ValueError).
  std::size_t checked_slot(const CheckpointSlot& slot, at::IntArrayRef shape,
                           at::ScalarType dtype) const;
  void write_slot(std::size_t slot, const at::Tensor& tensor);
  void note_received(std::size_t slot);
  at::Tensor& shadow_of(std::size_t param);  // staged: the param's shadow, taken on first use
  void process_param(std::size_t param);     // quantize a completed int8 parameter
  std::vector<std::string> missing_names(bool require_complete) const;

  ParameterStore& store_;
  UpdateMode mode_;
  std::vector<bool> received_;  // per checkpoint slot
  std::size_t received_count_ = 0;
  std::vector<std::optional<RuntimeTensor>> shadow_;  // staged: per runtime parameter
  std::vector<at::Tensor> staging_;                   // int8 parameters awaiting their last slot
  at::Tensor slab_;  // contiguous_destination's, handed back to the store when the session ends
  std::vector<at::Tensor> scratch_;  // per slot: where in slab_ a scattered tensor lands
  bool wrote_live_ = false;
};

}  // namespace hotswap::model_loader
