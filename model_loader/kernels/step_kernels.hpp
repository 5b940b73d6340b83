// StepKernels: the kernels a dense decoder's forward step runs on a GPU, at the level of tensors:
// RMSNorm (fused with the residual add), rotary embedding, appending the step's keys and values to
// the paged cache, paged attention, SiLU-and-mul. Two implementations share the interface:
// - FlashInfer's (flashinfer_kernels.hpp), on CUDA tensors in bfloat16 or float16, launched on
//   the current CUDA stream with no host wait, so that a CUDA graph captures them;
// - the reference, in libtorch on any device and dtype, which computes what the kernels compute
//   from the same step metadata. It stands in for them where there is no GPU, so that the forward
//   that composes them, its metadata, its padding and its graphs are tested here.
//
// A step's metadata (KernelStepInputs) is FlashInfer's: int32 device arrays, the pages of each
// sequence as an indptr over a flat list of block indices of KvBlockPool (whose layer tensors are
// the NHD pages [blocks * block_size, kv_heads, head_dim]).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model_loader/kernels/decode_step_metadata.hpp"

namespace hotswap::model_loader::kernels {

// One sequence's share of a step, as the metadata is made from it: `num_tokens` new tokens at
// positions start .. start + num_tokens - 1, and the blocks that hold positions 0 .. the last.
struct KernelStepSequence {
  std::int64_t start = 0;
  std::int64_t num_tokens = 0;
  std::span<const std::int32_t> blocks;
};

// What every kernel of one step reads besides the weights and the cache: views of one int32
// device tensor, copied from the host in one copy.
struct KernelStepInputs {
  std::int64_t rows = 0;       // token rows of the step (a padded decode's padding included)
  std::int64_t sequences = 0;  // its sequences (padding rows are sequences of one token)
  bool decode = false;         // one row per sequence: the decode kernel serves it
  at::Tensor positions;        // [rows]: each row's position in its sequence
  at::Tensor sequence_of;      // [rows]: each row's sequence
  at::Tensor q_indptr;         // [sequences + 1]: sequence i's rows
  at::Tensor page_indptr;      // [sequences + 1]: sequence i's entries of page_indices
  at::Tensor page_indices;     // the blocks, sequence after sequence
  at::Tensor last_page_len;    // [sequences]: positions filled in each one's last block
  // The two indptrs on the host: the attention planners read them.
  std::vector<std::int32_t> q_indptr_host, page_indptr_host;

  // A step of ragged sequences (prefills, mixed steps, an eager decode), on `device`.
  static KernelStepInputs make(std::span<const KernelStepSequence> sequences,
                               std::int64_t block_size, c10::Device device);
  // Views of a decode image already on the device (`image`: DecodeStepMetadata::image() copied
  // whole), for its first `metadata.rows()` rows.
  static KernelStepInputs of_decode(const DecodeStepMetadata& metadata, const at::Tensor& image);
};

// The shapes every kernel of a model shares.
struct StepKernelShape {
  std::int64_t q_heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  std::optional<std::int64_t> sliding_window;  // positions a query sees, itself included
  double eps = 1e-6;                           // RMSNorm's
  // cos and sin of every position's rotary angles, float32 [max_position, head_dim]: the cos of
  // the head_dim / 2 frequencies, then their sin. Undefined: no rotary embedding.
  at::Tensor cos_sin;
};

class StepKernels {
 public:
  virtual ~StepKernels() = default;

  // Before the step's first layer and outside any graph capture: plans its attention from the
  // host indptrs (FlashInfer's plan/run split). `for_cuda_graph`: a plan whose sizes depend on
  // the number of sequences alone, so that a captured run replays under a new plan.
  virtual void plan(const KernelStepInputs& step, bool for_cuda_graph) = 0;

  // x [rows, width] normalized, times `weight` [width].
  virtual at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) = 0;
  // residual += x, then x = rms_norm(residual) * weight, both in place.
  virtual void add_rms_norm(at::Tensor& x, at::Tensor& residual, const at::Tensor& weight) = 0;
  // silu(gate_up[:, :width]) * gate_up[:, width:], gate_up [rows, 2 * width].
  virtual at::Tensor silu_and_mul(const at::Tensor& gate_up) = 0;
  // Rotates q [rows, q_heads, head_dim] and k [rows, kv_heads, head_dim] in place by the angles
  // of the rows' positions (Hugging Face's rotate_half convention).
  virtual void rotate(at::Tensor& q, at::Tensor& k, const KernelStepInputs& step) = 0;
  // Writes k and v [rows, kv_heads, head_dim] at the rows' positions of their sequences' pages.
  virtual void append_kv(const at::Tensor& k, const at::Tensor& v, const at::Tensor& key_pages,
                         const at::Tensor& value_pages, const KernelStepInputs& step) = 0;
  // Causal attention of q [rows, q_heads, head_dim] over each row's sequence (the step's own
  // keys appended first), under the sliding window, grouped-query: [rows, q_heads, head_dim].
  virtual at::Tensor attention(const at::Tensor& q, const at::Tensor& key_pages,
                               const at::Tensor& value_pages, const KernelStepInputs& step) = 0;
};

// FlashInfer's kernels for `shape` on `device` (CUDA, bfloat16 or float16). Why they cannot serve
// it (flashinfer_kernels.hpp's instantiations, a build without them) is refusal()'s answer.
std::unique_ptr<StepKernels> make_flashinfer_step_kernels(const StepKernelShape& shape,
                                                          c10::ScalarType dtype,
                                                          c10::Device device);
// Why FlashInfer's kernels cannot run a model of `shape` in `dtype` on `device`; nullopt: they
// can.
std::optional<std::string> flashinfer_refusal(const StepKernelShape& shape, c10::ScalarType dtype,
                                              c10::Device device);
// The libtorch reference of the same kernels, on any device and dtype.
std::unique_ptr<StepKernels> make_reference_step_kernels(const StepKernelShape& shape);

}  // namespace hotswap::model_loader::kernels
