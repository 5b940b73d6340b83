// Decode attention over the paged cache: FlashInfer's batch decode kernel (attention/decode.cuh)
// and its planner (attention/scheduler.cuh), for bfloat16 and float16 at head dims 64 and 128.
// One variant serves every architecture: softmax attention with a sliding window whose span is a
// run-time value (-1: none), no custom mask, no soft cap, no ALiBi; the rotary embedding is applied
// before the keys reach the cache (kNone here).
#include <flashinfer/attention/decode.cuh>
#include <flashinfer/attention/default_decode_params.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "model_loader/kernels/attention_common.cuh"
#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {
namespace {

using Variant = flashinfer::DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/true,
                                             /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;
template <typename T>
using Params = flashinfer::BatchDecodeParams<T, T, T, std::int32_t>;
constexpr auto kNoRope = flashinfer::PosEncodingMode::kNone;

}  // namespace

KernelStatus plan_decode(const AttentionShape& shape, const AttentionWorkspace& workspace,
                         const std::int32_t* page_indptr_host, std::uint32_t sequences,
                         bool for_cuda_graph, AttentionPlan& plan, StreamHandle stream) {
  if (shape.kv_heads == 0 || shape.q_heads % shape.kv_heads != 0 ||
      !decode_group_size_supported(shape.q_heads / shape.kv_heads)) {
    return cudaErrorInvalidValue;
  }
  return detail::with_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    return detail::with_head_dim(shape.head_dim, [&](auto head_dim) -> cudaError_t {
      constexpr std::uint32_t kHeadDim = decltype(head_dim)::value;
      return detail::make_plan<flashinfer::DecodePlanInfo>(
          plan, /*prefill=*/false, [&](flashinfer::DecodePlanInfo& info) {
            cudaError_t status = cudaErrorInvalidValue;
            DISPATCH_GQA_GROUP_SIZE(shape.q_heads / shape.kv_heads, kGroupSize, {
              auto estimate = flashinfer::BatchDecodeWithPagedKVCacheWorkEstimationDispatched<
                  kGroupSize, kHeadDim, kNoRope, Variant, Params<T>>;
              status = flashinfer::DecodePlan<kHeadDim, kNoRope, Variant, Params<T>>(
                  workspace.float_buffer, workspace.float_bytes, workspace.int_buffer,
                  workspace.pinned_int_buffer, workspace.int_bytes, info,
                  const_cast<std::int32_t*>(page_indptr_host), sequences, shape.q_heads,
                  shape.page_size, for_cuda_graph, detail::as_stream(stream), estimate);
            });
            return status;
          });
    });
  });
}

KernelStatus run_decode(const AttentionShape& shape, const AttentionWorkspace& workspace,
                        const AttentionPlan& plan, const void* q, const PagedKvView& cache,
                        void* output, StreamHandle stream) {
  if (plan.prefill) return cudaErrorInvalidValue;
  return detail::with_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    return detail::with_head_dim(shape.head_dim, [&](auto head_dim) -> cudaError_t {
      constexpr std::uint32_t kHeadDim = decltype(head_dim)::value;
      flashinfer::DecodePlanInfo info;
      info.FromVector(plan.info);
      Params<T> params;
      detail::fill_attention_params<T>(params, shape, q, cache, output, workspace, info);
      char* int_buffer = static_cast<char*>(workspace.int_buffer);
      char* float_buffer = static_cast<char*>(workspace.float_buffer);
      T* partial_o = nullptr;
      float* partial_lse = nullptr;
      if (info.split_kv) {
        partial_o = flashinfer::GetPtrFromBaseOffset<T>(float_buffer, info.v_offset);
        partial_lse = flashinfer::GetPtrFromBaseOffset<float>(float_buffer, info.s_offset);
        if (info.enable_cuda_graph) {
          params.block_valid_mask =
              flashinfer::GetPtrFromBaseOffset<bool>(int_buffer, info.block_valid_mask_offset);
        }
      }
      params.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
      return flashinfer::BatchDecodeWithPagedKVCacheDispatched<kHeadDim, kNoRope, Variant>(
          params, partial_o, partial_lse, /*enable_pdl=*/false, detail::as_stream(stream));
    });
  });
}

}  // namespace hotswap::model_loader::kernels
