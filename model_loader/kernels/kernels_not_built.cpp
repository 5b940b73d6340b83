// The kernel interface in a build without hotswap_kernels' CUDA sources (no GPU build, no
// FlashInfer headers, or a sanitized build): every call answers kNotBuilt, and callers take the
// libtorch path, asking kernels_built() first.
#include "model_loader/kernels/flashinfer_kernels.hpp"

namespace hotswap::model_loader::kernels {

KernelStatus rms_norm(KernelDType, const void*, const void*, void*, std::uint32_t, std::uint32_t,
                      float, StreamHandle) {
  return kNotBuilt;
}
KernelStatus fused_add_rms_norm(KernelDType, void*, void*, const void*, std::uint32_t,
                                std::uint32_t, float, StreamHandle) {
  return kNotBuilt;
}
KernelStatus silu_and_mul(KernelDType, const void*, void*, std::uint32_t, std::uint32_t,
                          StreamHandle) {
  return kNotBuilt;
}
KernelStatus apply_rotary(KernelDType, void*, void*, const float*, const std::int32_t*,
                          std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t,
                          StreamHandle) {
  return kNotBuilt;
}
KernelStatus append_paged_kv(KernelDType, const PagedKvView&, const void*, const void*,
                             const std::int32_t*, const std::int32_t*, std::uint32_t,
                             StreamHandle) {
  return kNotBuilt;
}
KernelStatus plan_decode(const AttentionShape&, const AttentionWorkspace&, const std::int32_t*,
                         std::uint32_t, bool, AttentionPlan&, StreamHandle) {
  return kNotBuilt;
}
KernelStatus run_decode(const AttentionShape&, const AttentionWorkspace&, const AttentionPlan&,
                        const void*, const PagedKvView&, void*, StreamHandle) {
  return kNotBuilt;
}
KernelStatus plan_prefill(const AttentionShape&, const AttentionWorkspace&, const std::int32_t*,
                          const std::int32_t*, std::uint32_t, std::uint32_t, bool, AttentionPlan&,
                          StreamHandle) {
  return kNotBuilt;
}
KernelStatus run_prefill(const AttentionShape&, const AttentionWorkspace&, const AttentionPlan&,
                         const void*, const std::int32_t*, const PagedKvView&, void*,
                         StreamHandle) {
  return kNotBuilt;
}
KernelStatus sample_top_k_top_p(const float*, const std::int32_t*, const float*,
                                const std::uint64_t*, const std::uint64_t*, std::int32_t*,
                                std::uint32_t, std::uint32_t, StreamHandle) {
  return kNotBuilt;
}
KernelStatus sample_min_p(const float*, const float*, const std::uint64_t*, const std::uint64_t*,
                          std::int32_t*, std::uint32_t, std::uint32_t, StreamHandle) {
  return kNotBuilt;
}

}  // namespace hotswap::model_loader::kernels
