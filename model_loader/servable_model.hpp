// ServableModel: what the worker serves. Every architecture family implements it (one file
// each under model_loader/architectures/), and the worker, its generation scheduler and its
// weight checker see nothing else: forward steps for generation, the two checksum formats,
// zero_weights, and the LoadableModel surface the receive engines load into. load_model picks
// the implementation from config.json's `architectures[0]` (architecture_registry.hpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model_loader/checkpoint.hpp"
#include "model_loader/kv_block_pool.hpp"
#include "model_loader/kv_cache.hpp"
#include "model_loader/layerwise_reload.hpp"
#include "model_loader/loadable_model.hpp"
#include "model_loader/model_config.hpp"
#include "protocol/timeouts.hpp"

namespace hotswap::transport {
class Communicator;
}

namespace hotswap::model_loader {

class LoraAdapter;
class WeightMapping;

// The kernels a forward step runs (vLLM's --attention-backend, with hotswap's values).
enum class AttentionBackend : std::uint8_t {
  // FlashInfer's kernels where they can run the model (a GPU; bfloat16 or float16; a dense model
  // at tensor-parallel size 1; no LoRA in the step), libtorch's ops elsewhere.
  kAuto,
  kFlashInfer,  // FlashInfer's, or a refusal at start naming why they cannot
  kTorch,       // libtorch's ops everywhere
  // The kernel path over the libtorch reference kernels, its graphs replayed eagerly: the GPU
  // path's logic on any device and dtype (for tests).
  kReference,
};

struct ModelOptions {
  std::optional<protocol::DType> dtype;  // runtime dtype; default: the checkpoint's
  bool quantize_int8 = false;            // --quantization int8
  UpdateMode update_mode = UpdateMode::kStaged;
  c10::Device device = c10::Device(c10::kCPU);
  // Tensor parallelism: the model is the shard of rank `group->rank()` of `group->world_size()`
  // (the architecture's weight mapping says what each rank keeps), and the calls marked
  // "collective" below all-reduce over `group`: every rank must make them, in the same order.
  // Null: the whole model (tp = 1).
  std::shared_ptr<transport::Communicator> tensor_parallel_group;
  // vLLM's --enable-expert-parallel: each rank holds whole experts of a sparse layer (the first
  // E % tp ranks one more) instead of a slice of every expert's width.
  bool enable_expert_parallel = false;
  // How long one of those all-reduces may wait for the other ranks.
  std::chrono::milliseconds collective_timeout{protocol::kDefaultTimeout};
  // The paged KV cache (vLLM's --block-size and --kv-cache-memory-bytes): positions per block,
  // and the bytes its keys and values may take on each rank, allocated as sequences grow.
  std::int64_t kv_block_size = 16;
  std::uint64_t kv_cache_memory_bytes = std::uint64_t{4} << 30;
  // On a GPU at tensor-parallel size 1 without --kv-cache-memory-bytes: the cache takes what
  // vLLM's budget leaves of the device (kv_cache_budget.hpp), not kv_cache_memory_bytes.
  struct GpuKvCacheSizing {
    double gpu_memory_utilization = 0.9;
    std::int64_t max_num_batched_tokens = 0;  // a step's tokens at most, for its activations
    std::int64_t max_num_seqs = 0;            // a step's sequences at most, for its logits
  };
  std::optional<GpuKvCacheSizing> gpu_kv_cache;
  // The kernel path's choices (model_loader/blocks/kernel_step_runner.hpp): vLLM's
  // --attention-backend, --cuda-graph-sizes (empty: vLLM's default list), --enforce-eager (no
  // graphs), and --max-num-seqs, the largest graph.
  struct StepKernelOptions {
    AttentionBackend backend = AttentionBackend::kAuto;
    std::vector<std::int64_t> cuda_graph_sizes;
    bool enforce_eager = false;
    std::int64_t max_num_seqs = 256;
  };
  StepKernelOptions step_kernels;
};

// One sequence's share of a forward step: `num_tokens` new tokens at positions
// cache.length .. cache.length + num_tokens - 1, appended to its cache by the step.
struct ForwardSlice {
  KvCache* cache = nullptr;
  std::int64_t num_tokens = 0;
  // The LoRA adapter its tokens run through (held by whoever made the slice for the step);
  // null: the base model.
  const LoraAdapter* lora = nullptr;
};

// What every forward step checks of its input before any work, raising a ValueError: each
// slice has a cache and at least one token, the slices cover `tokens` exactly, and every id is
// below `vocab_size`. Returns the ids as int64. Token ids are checked where the caller made them
// (the host, for every caller here), before they travel: a check on a device would wait for it.
at::Tensor checked_step_tokens(const at::Tensor& tokens, const std::vector<ForwardSlice>& slices,
                               std::int64_t vocab_size);

class ServableModel : public LoadableModel {
 public:
  ~ServableModel() override;

  virtual const ModelConfig& config() const = 0;
  virtual c10::ScalarType dtype() const = 0;  // of the runtime weights
  virtual std::uint64_t runtime_bytes() const = 0;

  // Fills every weight from a checkpoint; every tensor the model needs must be there.
  virtual void load_checkpoint(const Checkpoint& checkpoint) = 0;

  virtual bool reload_active() const = 0;
  // Inplace mode: true from the first write of a session until a session commits whole
  // (after a failure: one that delivered every tensor). Generation must refuse while dirty.
  virtual bool is_dirty() const = 0;

  // One forward step over several sequences: `tokens` holds every slice's new tokens, in slice
  // order. Returns float32 logits of each slice's last token [slices, vocab], or of every token
  // [tokens, vocab] when `all_positions` (the whole vocabulary on every tensor-parallel rank).
  // Collective.
  virtual at::Tensor forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                             bool all_positions = false) const = 0;
  // The paged KV cache forward steps take their blocks from: generation reads how many are
  // free to decide, before a step, which sequences it can run (and which to preempt). Null for
  // a model without one, whose caches are unbounded.
  virtual const KvBlockPool* kv_pool() const { return nullptr; }
  // How its steps run, for the start-up log: "libtorch", or the kernels and graphs it uses.
  virtual std::string step_path() const { return "libtorch"; }

  // Zeroes every runtime tensor (vLLM's weight_checker `reset`): a following update can then
  // be seen to land whole. Not allowed during a reload.
  virtual void zero_weights() = 0;

  // SHA-256 of each runtime tensor's bytes, keyed `<key_prefix><runtime name>` (vLLM's checker
  // prefixes "dp0:pp0:pcp0:tp0:"); int8 scales appear as `<name>_scale`. A "{tp}" in the prefix
  // is replaced by this model's tensor-parallel rank.
  virtual std::map<std::string, std::string> runtime_checksums(
      const std::string& key_prefix) const = 0;
  // SHA-256 of each checkpoint tensor rebuilt from runtime storage (unfused, in the dtype the
  // checkpoint had), keyed by its Hugging Face name. A ValueError when the runtime format is
  // lossy (int8), since the checkpoint's bytes can no longer be recovered. Collective: a
  // tensor-parallel rank holds a slice, and the ranks put each tensor back together.
  virtual std::map<std::string, std::string> checkpoint_checksums() const = 0;

  // A PEFT LoRA adapter read from `directory` and laid onto this model (this tensor-parallel
  // rank's part of it) through weight_mapping(), for ForwardSlice::lora. A ValueError naming
  // what does not fit: a rank past `max_rank`, a module the model lacks or does not adapt, a
  // shape that does not match; or that the model takes none (no weight mapping).
  virtual std::shared_ptr<const LoraAdapter> load_lora_adapter(
      const std::filesystem::path& directory, std::int64_t max_rank) const;
  // How its checkpoint's tensors lay onto its runtime parameters, which LoRA adapters are laid
  // out by (read from a directory, or received through a weight update: LoraStaging); null for a
  // model that takes no adapters (the default).
  virtual const WeightMapping* weight_mapping() const { return nullptr; }
};

// Reads config.json and the safetensors of `directory` and builds the model its
// `architectures[0]` names (ArchitectureRegistry); every checkpoint tensor the model needs must
// be there.
std::shared_ptr<ServableModel> load_model(const std::filesystem::path& directory,
                                          const ModelOptions& options = {});

}  // namespace hotswap::model_loader
