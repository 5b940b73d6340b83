// The FlashInfer kernels hotswap runs on a GPU: paged attention for decodes and for ragged
// prefills (causal, sliding window, grouped-query), appending a step's keys and values to the
// pages, RMSNorm (fused with the residual add), rotary embedding from a cos/sin table, SiLU-and-mul
// and sampling (top-k, top-p or min-p per row, a seed per row).
//
// They are FlashInfer's header-only CUDA templates, from the pinned flashinfer-python wheel
// (scripts/flashinfer-requirements.txt), compiled by nvcc into hotswap_kernels with only the
// instantiations listed here: bfloat16 and float16, head dims 64 and 128 (attention), int32
// indices, the NHD page layout of KvBlockPool ([pages, page_size, kv_heads, head_dim]). Nothing
// is compiled at run time and nothing of FlashInfer's Python is used.
//
// This header is the whole interface and holds no CUDA type, so that g++ sources include it: a
// device pointer is a void*, a stream a StreamHandle (cudaStream_t), and each call returns the
// CUDA status (cudaError_t as an int, 0 for success) for the caller to raise with its context
// (describe_kernel_status). Everything runs on `stream` and nothing here synchronizes with the
// host, except the planners, which read their indptr from host memory (as FlashInfer's plan does)
// and copy the plan to the device on `stream`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hotswap::model_loader::kernels {

// The element types the kernels are instantiated for.
enum class KernelDType : std::uint8_t { kFloat16, kBFloat16 };

using StreamHandle = void*;  // a cudaStream_t
using KernelStatus = int;    // a cudaError_t; 0 is cudaSuccess

// What a status means, for an error message: "cudaErrorX: <the runtime's text>", or that the
// kernels were not built.
std::string describe_kernel_status(KernelStatus status);

// Whether hotswap_kernels was built (a CUDA toolkit and FlashInfer's headers at configure time).
// Without it every call below returns kNotBuilt.
bool kernels_built();
inline constexpr KernelStatus kNotBuilt = -1;

// The head dims attention is instantiated for; another takes the libtorch path.
bool attention_head_dim_supported(std::uint32_t head_dim);
// The query heads per key/value head FlashInfer's decode kernel dispatches on (1, 2, 3, 4, 6,
// 8, 16); another group size takes the prefill kernel for decodes too.
bool decode_group_size_supported(std::uint32_t group_size);

// One layer's paged keys and values, NHD: `keys` and `values` are [pages, page_size, kv_heads,
// head_dim], contiguous. Sequence i holds pages page_indices[page_indptr[i] .. page_indptr[i+1])
// and fills `last_page_len[i]` positions of its last one. The three index arrays are device
// memory.
struct PagedKvView {
  void* keys = nullptr;
  void* values = nullptr;
  std::int32_t* page_indices = nullptr;
  std::int32_t* page_indptr = nullptr;
  std::int32_t* last_page_len = nullptr;
  std::uint32_t sequences = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t page_size = 0;
  std::uint32_t head_dim = 0;
};

// --- elementwise and row kernels ----------------------------------------------------------------

// output[r] = input[r] / rms(input[r]) * weight, rows of `width` contiguous elements.
KernelStatus rms_norm(KernelDType dtype, const void* input, const void* weight, void* output,
                      std::uint32_t rows, std::uint32_t width, float eps, StreamHandle stream);
// residual += input, then input = rms_norm(residual) * weight, in place (a decoder layer's
// "add the sublayer's output, normalize for the next"): one pass instead of three.
KernelStatus fused_add_rms_norm(KernelDType dtype, void* input, void* residual, const void* weight,
                                std::uint32_t rows, std::uint32_t width, float eps,
                                StreamHandle stream);
// output[r] = silu(gate_up[r, :width]) * gate_up[r, width:], gate_up [rows, 2 * width].
KernelStatus silu_and_mul(KernelDType dtype, const void* gate_up, void* output, std::uint32_t rows,
                          std::uint32_t width, StreamHandle stream);
// Rotates the first `rotary_dim` dims of every head of q [tokens, q_heads, head_dim] and k
// [tokens, kv_heads, head_dim] in place (Hugging Face's rotate_half convention), by the angles of
// `positions` [tokens] (int32, device) read from `cos_sin` [max_position, rotary_dim] float32:
// cos in the first half of a row, sin in the second. Every rotary scaling an architecture uses is
// in the table the caller computes, so one kernel serves them all.
KernelStatus apply_rotary(KernelDType dtype, void* q, void* k, const float* cos_sin,
                          const std::int32_t* positions, std::uint32_t tokens,
                          std::uint32_t q_heads, std::uint32_t kv_heads, std::uint32_t rotary_dim,
                          std::uint32_t head_dim, StreamHandle stream);
// Writes keys and values [tokens, kv_heads, head_dim] into `cache`'s pages: token t is position
// positions[t] of sequence sequence_of[t] (both int32, device).
KernelStatus append_paged_kv(KernelDType dtype, const PagedKvView& cache, const void* keys,
                             const void* values, const std::int32_t* sequence_of,
                             const std::int32_t* positions, std::uint32_t tokens,
                             StreamHandle stream);

// --- attention ------------------------------------------------------------------------------

// The scratch FlashInfer's attention plans into: `float_bytes` of device memory for split-KV
// partial results, `int_bytes` of device memory for the schedule and as many of pinned host
// memory it is staged in. Allocated once (the sizes below) and reused by every step, so that a
// CUDA graph captured over a step finds its plan where it left it.
struct AttentionWorkspace {
  void* float_buffer = nullptr;
  std::size_t float_bytes = 0;
  void* int_buffer = nullptr;
  void* pinned_int_buffer = nullptr;
  std::size_t int_bytes = 0;
};
// FlashInfer's own defaults (128 MB and 8 MB), enough for any batch its plans make.
inline constexpr std::size_t kAttentionFloatWorkspaceBytes = std::size_t{128} << 20;
inline constexpr std::size_t kAttentionIntWorkspaceBytes = std::size_t{8} << 20;

// The shape every attention call of a model shares.
struct AttentionShape {
  KernelDType dtype = KernelDType::kBFloat16;
  std::uint32_t q_heads = 0;
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t page_size = 0;
  std::int32_t window_left = -1;  // a sliding window's span before a query; -1: none
  float sm_scale = 0;             // 1 / sqrt(head_dim) for every supported architecture
};

// A plan: how a batch's work is split across the GPU, made on the host from the batch's page
// counts before the step (FlashInfer's plan/run split), and read by run_*. Opaque.
struct AttentionPlan {
  std::vector<std::int64_t> info;
  bool prefill = false;
};

// Decode: one query token per sequence, q [sequences, q_heads, head_dim]. `page_indptr_host` is
// the sequences' page counts as an indptr (sequences + 1 entries, host memory). For a CUDA graph
// (`for_cuda_graph`), the plan's sizes are fixed by `sequences` alone, and a replay may change
// the pages and lengths but not the batch size.
KernelStatus plan_decode(const AttentionShape& shape, const AttentionWorkspace& workspace,
                         const std::int32_t* page_indptr_host, std::uint32_t sequences,
                         bool for_cuda_graph, AttentionPlan& plan, StreamHandle stream);
KernelStatus run_decode(const AttentionShape& shape, const AttentionWorkspace& workspace,
                        const AttentionPlan& plan, const void* q, const PagedKvView& cache,
                        void* output, StreamHandle stream);

// Prefill (and mixed steps): sequence i's queries are rows q_indptr[i] .. q_indptr[i+1] of q
// [rows, q_heads, head_dim], its newest positions, attending causally to its cache (which already
// holds them: append first). Both indptrs on the host for the plan and on the device for the run.
KernelStatus plan_prefill(const AttentionShape& shape, const AttentionWorkspace& workspace,
                          const std::int32_t* q_indptr_host, const std::int32_t* page_indptr_host,
                          std::uint32_t sequences, std::uint32_t rows, bool for_cuda_graph,
                          AttentionPlan& plan, StreamHandle stream);
KernelStatus run_prefill(const AttentionShape& shape, const AttentionWorkspace& workspace,
                         const AttentionPlan& plan, const void* q, const std::int32_t* q_indptr,
                         const PagedKvView& cache, void* output, StreamHandle stream);

// --- sampling -------------------------------------------------------------------------------

// Draws one token per row of `probs` [rows, vocab] float32 (the softmax of the logits already
// divided by the row's temperature) by FlashInfer's rejection sampling, which never sorts the
// vocabulary. Row r draws from Philox with seed seeds[r] at offset offsets[r] (device arrays), so
// its draw depends on its own seed and step alone; `tokens` [rows] int32. Per-row filters, device
// arrays:
// - keeping the row's top_k[r] most likely tokens (0 or >= vocab: all) and, of those, the
//   smallest set whose mass reaches top_p[r] (1: all);
KernelStatus sample_top_k_top_p(const float* probs, const std::int32_t* top_k, const float* top_p,
                                const std::uint64_t* seeds, const std::uint64_t* offsets,
                                std::int32_t* tokens, std::uint32_t rows, std::uint32_t vocab,
                                StreamHandle stream);
// - keeping the tokens at least min_p[r] times as likely as the most likely one. A batch whose
//   rows mix min-p with top-k or top-p is sampled by the libtorch path.
KernelStatus sample_min_p(const float* probs, const float* min_p, const std::uint64_t* seeds,
                          const std::uint64_t* offsets, std::int32_t* tokens, std::uint32_t rows,
                          std::uint32_t vocab, StreamHandle stream);

}  // namespace hotswap::model_loader::kernels
