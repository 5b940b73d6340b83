// LlamaModel: a Llama-family causal LM (Llama, Mistral, Qwen2, Qwen3) in libtorch with vLLM's
// runtime layout (fused qkv_proj and gate_up_proj, tied lm_head when configured), a KV cache,
// batched forward steps, and layerwise reload of checkpoint-format weights while it serves.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "model_loader/checkpoint.hpp"
#include "model_loader/kv_cache.hpp"
#include "model_loader/layerwise_reload.hpp"
#include "model_loader/loadable_model.hpp"
#include "model_loader/model_config.hpp"
#include "model_loader/parameter_store.hpp"
#include "model_loader/weight_mapping.hpp"

namespace hotswap::model_loader {

struct ModelOptions {
  std::optional<protocol::DType> dtype;  // runtime dtype; default: the checkpoint's
  bool quantize_int8 = false;            // --quantization int8
  UpdateMode update_mode = UpdateMode::kStaged;
  c10::Device device = c10::Device(c10::kCPU);
};

// One sequence's share of a forward step: `num_tokens` new tokens at positions
// cache.length .. cache.length + num_tokens - 1, appended to its cache by the step.
struct ForwardSlice {
  KvCache* cache = nullptr;
  std::int64_t num_tokens = 0;
};

class LlamaModel final : public LoadableModel {
 public:
  // Reads config.json and the safetensors of `directory`; every checkpoint tensor must be there.
  static std::shared_ptr<LlamaModel> load(const std::filesystem::path& directory,
                                          const ModelOptions& options = {});
  // A model with uninitialized weights; load_checkpoint or a complete reload fills them.
  LlamaModel(ModelConfig config, ModelOptions options);

  const ModelConfig& config() const { return config_; }
  const WeightMapping& mapping() const { return mapping_; }
  const ModelOptions& options() const { return options_; }
  c10::ScalarType dtype() const { return store_.dtype(); }
  std::uint64_t runtime_bytes() const { return store_.nbytes(); }

  void load_checkpoint(const Checkpoint& checkpoint);

  // LoadableModel: a layerwise reload session. load_weights outside one is a RuntimeError.
  void load_weights(const std::vector<NamedTensor>& weights) override;
  void start_reload() override;
  void finish_reload() override;
  void abort_reload() override;
  void apply_patches(const std::vector<WeightPatch>& patches) override;
  void check_patches(const std::vector<WeightPatch>& patches) const override;
  // Staged sessions receive in place: the shadow rows of the tensor (see LayerwiseReload).
  std::optional<at::Tensor> destination_for(const std::string& name, c10::ScalarType dtype,
                                            c10::IntArrayRef shape) override;
  void mark_received(const std::string& name) override;
  c10::Device device() const override { return store_.device(); }

  bool reload_active() const;
  // Inplace mode: true from the first write of a session until a session commits whole
  // (after a failure: one that delivered every tensor). Generation must refuse while dirty.
  bool is_dirty() const;

  // One forward step over several sequences: `tokens` holds every slice's new tokens, in slice
  // order. Returns float32 logits of each slice's last token [slices, vocab], or of every token
  // [tokens, vocab] when `all_positions`.
  at::Tensor forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                     bool all_positions = false) const;

  // Zeroes every runtime tensor (vLLM's weight_checker `reset`): a following update can then
  // be seen to land whole. Not allowed during a reload.
  void zero_weights();

  // SHA-256 of each runtime tensor's bytes, keyed `<key_prefix><runtime name>` (vLLM's checker
  // prefixes "dp0:pp0:pcp0:tp0:"); int8 scales appear as `<name>_scale`.
  std::map<std::string, std::string> runtime_checksums(const std::string& key_prefix) const;
  // SHA-256 of each checkpoint tensor rebuilt from runtime storage (unfused, in the dtype the
  // checkpoint had), keyed by its Hugging Face name. A ValueError when the runtime format is
  // lossy (int8), since the checkpoint's bytes can no longer be recovered.
  std::map<std::string, std::string> checkpoint_checksums() const;

 private:
  // A sparse patch checked and mapped onto its runtime parameter's flat positions.
  struct ResolvedPatch {
    const CheckpointSlot* slot;
    at::Tensor runtime_indices;
    at::Tensor values;
  };
  std::vector<ResolvedPatch> resolve_patches(const std::vector<WeightPatch>& patches) const;

  at::Tensor linear(const at::Tensor& x, std::size_t param) const;
  at::Tensor rms_norm(const at::Tensor& x, std::size_t param) const;
  // cos and sin of the rotary angles at `positions`, [N, 1, head_dim] in the compute dtype.
  std::pair<at::Tensor, at::Tensor> rope_tables(const at::Tensor& positions) const;

  ModelConfig config_;
  ModelOptions options_;
  WeightMapping mapping_;
  ParameterStore store_;
  c10::ScalarType compute_dtype_;
  at::Tensor inv_freq_;  // float32 [head_dim / 2], on the model's device

  struct LayerParams {
    std::size_t input_norm, qkv, qkv_bias, o, o_bias, q_norm, k_norm, post_norm, gate_up, down;
  };
  std::vector<LayerParams> layers_;
  std::size_t embed_, final_norm_, lm_head_;
  static constexpr std::size_t kNone = static_cast<std::size_t>(-1);

  mutable std::mutex reload_mutex_;
  std::unique_ptr<LayerwiseReload> reload_;
  std::map<std::string, c10::ScalarType> checkpoint_dtypes_;  // as each tensor last arrived
  bool dirty_ = false;
  bool dirty_before_session_ = false;
};

}  // namespace hotswap::model_loader
