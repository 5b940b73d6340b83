// KernelStepRunner: how a forward step runs on the GPU's path (FlashInfer's kernels, decode steps
// replayed as CUDA graphs), whatever the family: it takes the step's KV blocks, lays out its
// metadata (KernelStepInputs), plans its attention, and runs the family's layers (the Body) once,
// eagerly, or, for a decode step, as the captured graph of its batch-size bucket, padded.
//
// A decode step of n sequences, where a graph size holds n: its token ids, positions and pages go
// into one host image (DecodeStepMetadata) copied whole to a device buffer whose address never
// changes; the attention is planned for the bucket's rows; and the bucket's graph replays the
// layers over those buffers, writing the logits into a buffer of its own. The graphs are kept by
// the addresses they read (DecodeGraphCache's StorageKey over the weights, the KV cache and the
// buffers): a staged commit, which swaps the weights for the shadows, switches to the other set
// between two steps, and no graph replays over memory it did not capture. Prefills, mixed steps
// and decodes past the largest size run eagerly over the same kernels.
//
// The GPU runs FlashInfer's kernels and libtorch's CUDA graphs; the reference kernels and the
// eager recorder stand in for both on any device, so that all of this runs in the tests.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model_loader/kernels/decode_graph_cache.hpp"
#include "model_loader/kernels/decode_step_metadata.hpp"
#include "model_loader/kernels/step_kernels.hpp"
#include "model_loader/kv_block_pool.hpp"
#include "model_loader/servable_model.hpp"

namespace hotswap::model_loader {

class KernelStepRunner {
 public:
  // A family's layers on the kernel path: float32 logits of `returned` rows (int64 indices;
  // undefined: every row) of a step of `ids` (int32 or int64, [step.rows]) laid out by `step`.
  using Body = std::function<at::Tensor(
      const at::Tensor& ids, const kernels::KernelStepInputs& step, const at::Tensor& returned)>;

  // `recorder` null: no graphs (--enforce-eager), every step eager. `max_model_len`: the longest
  // sequence a decode row holds pages for.
  KernelStepRunner(std::unique_ptr<kernels::StepKernels> kernels,
                   std::shared_ptr<kernels::GraphRecorder> recorder, kernels::CudaGraphSizes sizes,
                   std::shared_ptr<KvBlockPool> pool, std::int64_t max_model_len,
                   std::int64_t vocab_size, c10::Device device);
  ~KernelStepRunner();
  KernelStepRunner(const KernelStepRunner&) = delete;
  KernelStepRunner& operator=(const KernelStepRunner&) = delete;

  // What the path holds on the device besides the weights and the KV cache, for its memory
  // budget: the graphs' shared pool (a step's temporaries at the largest size: graphs captured
  // into one pool reuse each other's memory), the attention's workspaces, the rotary table, and
  // the graphs' logits and metadata buffers; `element_size`: the activations'.
  static std::uint64_t device_bytes(const ModelConfig& config, const kernels::CudaGraphSizes& sizes,
                                    std::int64_t element_size);

  kernels::StepKernels& kernels() const { return *kernels_; }

  // ServableModel::forward over `body`; `weights`: where every weight the body reads lives now
  // (the caller holds the weights' lock). One step at a time: the plan, the graphs and their
  // buffers serve every step.
  at::Tensor forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                     bool all_positions, std::span<const void* const> weights, const Body& body);

  // The graphs, null without.
  const kernels::DecodeGraphCache* graphs() const { return graphs_.get(); }

 private:
  at::Tensor eager(const at::Tensor& ids, const std::vector<ForwardSlice>& slices,
                   bool all_positions, const Body& body);
  at::Tensor decode_with_graph(const at::Tensor& ids, const std::vector<ForwardSlice>& slices,
                               std::span<const void* const> weights, const Body& body);
  void allocate_buffers();
  // The pages a decode row of the graphs' metadata has room for: one sequence of max_model_len.
  std::int64_t max_blocks_per_row() const;

  std::unique_ptr<kernels::StepKernels> kernels_;
  std::unique_ptr<kernels::DecodeGraphCache> graphs_;
  std::shared_ptr<KvBlockPool> pool_;
  std::int64_t max_model_len_;
  std::int64_t vocab_size_;
  c10::Device device_;
  // Where padding rows read and write: a block no sequence holds.
  KvCache scratch_;
  // The decode graphs' static buffers, made on the first decode step.
  std::optional<kernels::DecodeStepMetadata> metadata_;
  at::Tensor host_image_;    // pinned on a GPU: the copy is asynchronous
  at::Tensor device_image_;  // the metadata the graphs read
  at::Tensor logits_;        // [largest size, vocab] float32, what the graphs write
  kernels::KernelStepInputs decode_step_;
  std::mutex mutex_;  // one step at a time
};

}  // namespace hotswap::model_loader
