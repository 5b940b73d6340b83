// Prefill attention over the paged cache (ragged queries, causal, sliding window, grouped-query):
// FlashInfer's batch prefill kernel (attention/prefill.cuh) and planner, for bfloat16 and float16
// at head dims 64 and 128. The planner picks a query tile of 16, 64 or 128 rows: only those are
// instantiated (its 32 serves head dims of 512 and more).
#include <flashinfer/attention/default_prefill_params.cuh>
#include <flashinfer/attention/prefill.cuh>
#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/attention/variants.cuh>

#include "model_loader/kernels/attention_common.cuh"
#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels {
namespace {

using Variant = flashinfer::DefaultAttention</*use_custom_mask=*/false, /*use_sliding_window=*/true,
                                             /*use_logits_soft_cap=*/false, /*use_alibi=*/false>;
template <typename T>
using Params = flashinfer::BatchPrefillPagedParams<T, T, T, std::int32_t>;

template <std::uint32_t kTileQ, std::uint32_t kHeadDim, typename T>
cudaError_t run_tile(Params<T>& params, T* partial_o, float* partial_lse, cudaStream_t stream) {
  return flashinfer::BatchPrefillWithPagedKVCacheDispatched<
      /*SAME_KV_STRIDES=*/true, kTileQ, kHeadDim, kHeadDim, flashinfer::PosEncodingMode::kNone,
      /*USE_FP16_QK_REDUCTION=*/false, flashinfer::MaskMode::kCausal, /*USE_TOKEN_HEAD_SF=*/false,
      Variant>(params, partial_o, partial_lse, /*enable_pdl=*/false, stream);
}

}  // namespace

KernelStatus plan_prefill(const AttentionShape& shape, const AttentionWorkspace& workspace,
                          const std::int32_t* q_indptr_host, const std::int32_t* page_indptr_host,
                          std::uint32_t sequences, std::uint32_t rows, bool for_cuda_graph,
                          AttentionPlan& plan, StreamHandle stream) {
  if (!attention_head_dim_supported(shape.head_dim) || shape.kv_heads == 0 ||
      shape.q_heads % shape.kv_heads != 0) {
    return cudaErrorInvalidValue;
  }
  return detail::make_plan<flashinfer::PrefillPlanInfo>(
      plan, /*prefill=*/true, [&](flashinfer::PrefillPlanInfo& info) {
        return flashinfer::PrefillPlan<std::int32_t>(
            workspace.float_buffer, workspace.float_bytes, workspace.int_buffer,
            workspace.pinned_int_buffer, workspace.int_bytes, info,
            const_cast<std::int32_t*>(q_indptr_host), const_cast<std::int32_t*>(page_indptr_host),
            rows, sequences, shape.q_heads, shape.kv_heads, shape.head_dim, shape.head_dim,
            shape.page_size, for_cuda_graph, /*sizeof_dtype_o=*/2, shape.window_left,
            /*fixed_split_size=*/-1, /*disable_split_kv=*/false, /*num_colocated_ctas=*/0,
            /*uniform_q_len=*/0, /*fixed_uniform_q_len=*/false, detail::as_stream(stream),
            /*kv_dtype_bytes=*/2);
      });
}

KernelStatus run_prefill(const AttentionShape& shape, const AttentionWorkspace& workspace,
                         const AttentionPlan& plan, const void* q, const std::int32_t* q_indptr,
                         const PagedKvView& cache, void* output, StreamHandle stream) {
  if (!plan.prefill) return cudaErrorInvalidValue;
  return detail::with_dtype(shape.dtype, [&](auto tag) {
    using T = decltype(tag);
    return detail::with_head_dim(shape.head_dim, [&](auto head_dim) -> cudaError_t {
      constexpr std::uint32_t kHeadDim = decltype(head_dim)::value;
      flashinfer::PrefillPlanInfo info;
      info.FromVector(plan.info);
      Params<T> params;
      detail::fill_attention_params<T>(params, shape, q, cache, output, workspace, info);
      params.q_indptr = const_cast<std::int32_t*>(q_indptr);
      params.group_size = flashinfer::uint_fastdiv(shape.q_heads / shape.kv_heads);
      char* int_buffer = static_cast<char*>(workspace.int_buffer);
      char* float_buffer = static_cast<char*>(workspace.float_buffer);
      params.qo_tile_indices =
          flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_buffer, info.qo_tile_indices_offset);
      params.merge_indptr = nullptr;
      params.total_num_rows = nullptr;
      T* partial_o = nullptr;
      float* partial_lse = nullptr;
      if (info.split_kv) {
        params.merge_indptr =
            flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_buffer, info.merge_indptr_offset);
        partial_o = flashinfer::GetPtrFromBaseOffset<T>(float_buffer, info.v_offset);
        partial_lse = flashinfer::GetPtrFromBaseOffset<float>(float_buffer, info.s_offset);
      }
      params.padded_batch_size = static_cast<std::uint32_t>(info.padded_batch_size);
      params.max_total_num_rows = static_cast<std::uint32_t>(info.total_num_rows);
      if (info.enable_cuda_graph) {
        params.block_valid_mask =
            flashinfer::GetPtrFromBaseOffset<bool>(int_buffer, info.block_valid_mask_offset);
        params.total_num_rows =
            flashinfer::GetPtrFromBaseOffset<std::uint32_t>(int_buffer, info.total_num_rows_offset);
      }
      const cudaStream_t s = detail::as_stream(stream);
      switch (info.cta_tile_q) {
        case 16:
          return run_tile<16, kHeadDim>(params, partial_o, partial_lse, s);
        case 64:
          return run_tile<64, kHeadDim>(params, partial_o, partial_lse, s);
        case 128:
          return run_tile<128, kHeadDim>(params, partial_o, partial_lse, s);
        default:
          return cudaErrorInvalidValue;
      }
    });
  });
}

}  // namespace hotswap::model_loader::kernels
