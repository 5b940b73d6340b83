// LoadableModel: what a receive engine loads weights into, the surface of a vLLM model that
// engines call. Engines never map names themselves: they hand checkpoint-format (Hugging Face)
// names and full tensors to load_weights, and the model maps them onto its runtime parameters
// (fused qkv_proj / gate_up_proj, tied embeddings) and runs its per-layer processing.
// The Llama-family model of model_loader/ implements it; engine tests implement it too.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/param_meta.hpp"

namespace hotswap::model_loader {

using NamedTensor = std::pair<std::string, at::Tensor>;
class Checkpoint;

// A sparse delta in checkpoint coordinates: `values` at the flat (row-major) positions
// `indices` (int32, unique) of the full Hugging Face tensor `name`.
struct WeightPatch {
  std::string name;
  at::Tensor indices;
  at::Tensor values;
  // The full checkpoint shape the sender declared (vLLM's update `shapes`); empty: not checked.
  std::vector<std::int64_t> shape = {};
};

class LoadableModel {
 public:
  virtual ~LoadableModel();

  // Loads checkpoint-format tensors. Rejects an unknown name or a shape mismatch, naming the
  // parameter, before any byte is written.
  virtual void load_weights(const std::vector<NamedTensor>& weights) = 0;
  // Every tensor of a checkpoint on disk, with load_weights' checks and all-or-nothing
  // validation. The default hands load_weights zero-copy views of the files; a model may read
  // the files straight into its storage instead.
  virtual void load_weights_from(const Checkpoint& checkpoint);

  // Receiving in place: where `name`'s tensor of `dtype` and `shape` can be written directly
  // (say, by a broadcast), skipping load_weights' copy; the caller fills the view, then calls
  // mark_received(name). nullopt where the tensor must go through load_weights instead (the
  // default; a name or shape load_weights would refuse; a dtype or layout that needs
  // converting). A view filled but never marked is discarded, as if it never arrived.
  virtual std::optional<at::Tensor> destination_for(const std::string& name, c10::ScalarType dtype,
                                                    c10::IntArrayRef shape);
  virtual void mark_received(const std::string& name);
  // Receiving packed chunks in place: one byte tensor where `tensors`, end to end in this order
  // with no padding (the packed wire's layout), land as the model's staged copies, so each
  // chunk is received straight into its part; the caller marks each tensor received once its
  // bytes are in. Tensors the model must place elsewhere (a fused parameter whose parts arrive
  // apart) land in it as scratch and are copied out on mark_received, up to `scratch_limit`
  // bytes of them (the memory of the receive buffers this replaces). nullopt (the default)
  // where it cannot: any tensor destination_for would refuse, or more scratch than that.
  virtual std::optional<at::Tensor> contiguous_destination(
      const std::vector<protocol::ParamMeta>& tensors, std::uint64_t scratch_limit);

  // Layerwise reload around a session (vLLM's initialize/finalize_layerwise_reload), with an
  // explicit abort that leaves the previous weights in place.
  virtual void start_reload() = 0;
  virtual void finish_reload() = 0;
  virtual void abort_reload() = 0;

  // Applies sparse patches in place, all or nothing: every patch is checked (known name,
  // floating values without NaN, indices in range and unique) before any is applied.
  // The default refuses: a model must say how its runtime storage takes patches.
  virtual void apply_patches(const std::vector<WeightPatch>& patches);
  // The checks of apply_patches alone, writing nothing: a receiver that commits patches later
  // (at finish) refuses a bad one when it arrives. The default refuses as apply_patches does.
  virtual void check_patches(const std::vector<WeightPatch>& patches) const;

  virtual c10::Device device() const = 0;
};

}  // namespace hotswap::model_loader
