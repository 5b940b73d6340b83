// What the paged-attention and KV-append files share: a PagedKvView as FlashInfer's kernels take
// it (paged_kv_t, NHD, int32 indices), the fields decode and prefill parameters have alike, and
// running a planner.
#pragma once

#include <flashinfer/attention/scheduler.cuh>
#include <flashinfer/page.cuh>

#include <exception>

#include "model_loader/kernels/kernel_dispatch.cuh"

namespace hotswap::model_loader::kernels::detail {

template <typename T>
flashinfer::paged_kv_t<T, std::int32_t> paged_kv(const PagedKvView& cache) {
  return flashinfer::paged_kv_t<T, std::int32_t>(
      cache.kv_heads, cache.page_size, cache.head_dim, cache.sequences, flashinfer::QKVLayout::kNHD,
      static_cast<T*>(cache.keys), static_cast<T*>(cache.values), cache.page_indices,
      cache.page_indptr, cache.last_page_len);
}

// Fills what decode's and prefill's parameters share: the query, the cache, the output, the
// head layout, the window and scale, and the schedule the plan wrote into the workspace. No
// rotary embedding (keys are rotated before they reach the cache), no soft cap, no LSE.
template <typename T, typename Params, typename PlanInfo>
void fill_attention_params(Params& params, const AttentionShape& shape, const void* q,
                           const PagedKvView& cache, void* output,
                           const AttentionWorkspace& workspace, const PlanInfo& info) {
  params.q = mutable_ptr<T>(q);
  params.paged_kv = paged_kv<T>(cache);
  params.o = static_cast<T*>(output);
  params.lse = nullptr;
  params.num_qo_heads = shape.q_heads;
  params.q_stride_n = static_cast<std::int32_t>(shape.q_heads * shape.head_dim);
  params.q_stride_h = static_cast<std::int32_t>(shape.head_dim);
  params.window_left = shape.window_left;
  params.logits_soft_cap = 0.0f;
  params.sm_scale = shape.sm_scale;
  params.rope_rcp_scale = 1.0f;
  params.rope_rcp_theta = 1.0f;
  char* int_buffer = static_cast<char*>(workspace.int_buffer);
  params.request_indices =
      flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_buffer, info.request_indices_offset);
  params.kv_tile_indices =
      flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_buffer, info.kv_tile_indices_offset);
  params.o_indptr =
      flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_buffer, info.o_indptr_offset);
  params.kv_chunk_size_ptr =
      flashinfer::GetPtrFromBaseOffset<std::int32_t>(int_buffer, info.kv_chunk_size_ptr_offset);
  params.block_valid_mask = nullptr;
}

// Runs a FlashInfer planner on a fresh `Info` and keeps what it planned in `plan`. A workspace
// too small for the batch is the one thing the planners throw for: it is a status here.
template <typename Info, typename Planner>
cudaError_t make_plan(AttentionPlan& plan, bool prefill, Planner&& planner) {
  Info info;
  cudaError_t status = cudaSuccess;
  try {
    status = planner(info);
  } catch (const std::exception&) {
    return cudaErrorMemoryAllocation;
  }
  plan.info = info.ToVector();
  plan.prefill = prefill;
  return status;
}

}  // namespace hotswap::model_loader::kernels::detail
