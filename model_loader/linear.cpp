#include "model_loader/linear.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mv.h>

#include <array>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "protocol/errors.hpp"

namespace hotswap::model_loader {
namespace {

#if defined(__x86_64__)
// bfloat16 rows of x against bfloat16 weights with AVX512-BF16's pair dot product (VDPBF16PS:
// the exact products of two bfloat16 pairs summed into float32 lanes), 32 columns per step. Each
// weight row is loaded once for all R rows of x, each row of x with an accumulator of its own;
// a width that is not a multiple of 32 ends with a masked load, zeros past the end.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void dot_rows_bfloat16_pairs(
    const c10::BFloat16* x, const c10::BFloat16* w, std::int64_t in, float* out,
    std::int64_t out_stride, std::int64_t begin, std::int64_t end) {
  const std::int64_t vector_end = in - in % 32;
  const __mmask32 tail = static_cast<__mmask32>((std::uint64_t{1} << (in % 32)) - 1);
  for (std::int64_t j = begin; j < end; ++j) {
    const c10::BFloat16* wj = w + j * in;
    __m512 acc[R];
    for (int r = 0; r < R; ++r)
      acc[r] = _mm512_setzero_ps();
    for (std::int64_t k = 0; k < vector_end; k += 32) {
      _mm_prefetch(reinterpret_cast<const char*>(wj + k) + kPrefetchBytes, _MM_HINT_T0);
      const auto wv = (__m512bh)_mm512_loadu_si512(wj + k);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_dpbf16_ps(acc[r], wv, (__m512bh)_mm512_loadu_si512(x + r * in + k));
    }
    if (tail != 0) {
      const auto wv = (__m512bh)_mm512_maskz_loadu_epi16(tail, wj + vector_end);
      for (int r = 0; r < R; ++r) {
        acc[r] = _mm512_dpbf16_ps(
            acc[r], wv, (__m512bh)_mm512_maskz_loadu_epi16(tail, x + r * in + vector_end));
      }
    }
    // Summed through memory: GCC 12's _mm512_reduce_add_ps trips its own -Wmaybe-uninitialized.
    alignas(64) float lanes[16];
    for (int r = 0; r < R; ++r) {
      _mm512_store_ps(lanes, acc[r]);
      float sum = 0;
      for (float lane : lanes)
        sum += lane;
      out[r * out_stride + j] = sum;
    }
  }
}

using PairKernel = void (*)(const c10::BFloat16*, const c10::BFloat16*, std::int64_t, float*,
                            std::int64_t, std::int64_t, std::int64_t);

template <std::size_t... R>
constexpr std::array<PairKernel, sizeof...(R)> pair_kernels(std::index_sequence<R...>) {
  return {&dot_rows_bfloat16_pairs<static_cast<int>(R) + 1>...};
}

// rows: 1 .. kSmallBatchRows.
void dot_rows_bfloat16_pairs(const c10::BFloat16* x, std::int64_t rows, const c10::BFloat16* w,
                             std::int64_t in, float* out, std::int64_t out_stride,
                             std::int64_t begin, std::int64_t end) {
  static constexpr auto kernels = pair_kernels(std::make_index_sequence<kSmallBatchRows>{});
  kernels[static_cast<std::size_t>(rows - 1)](x, w, in, out, out_stride, begin, end);
}
#endif

// Whether the CPU multiplies bfloat16 itself (AVX512-BF16: Zen 4, Cooper Lake, Sapphire Rapids
// and later): libtorch's bfloat16 matmul (oneDNN) runs on it, and so does the pair kernel.
bool has_native_bfloat16() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

bool small_batch_applies(const at::Tensor& x, const at::Tensor& weight) {
  return x.device().is_cpu() && weight.device().is_cpu() && x.dim() == 2 && weight.dim() == 2 &&
         x.size(0) <= kSmallBatchRows && x.size(1) == weight.size(1) && weight.is_contiguous() &&
         (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16);
}

}  // namespace

at::Tensor small_batch_linear(const at::Tensor& x, const at::Tensor& weight, DotKernel kernel) {
  if (!small_batch_applies(x, weight)) {
    throw protocol::ValueError(
        "small_batch_linear takes up to " + std::to_string(kSmallBatchRows) +
        " rows of x [rows, in] and a contiguous float32 or bfloat16 weight [out, in] on the CPU");
  }
  const std::int64_t rows = x.size(0), in = x.size(1), out_features = weight.size(0);
  at::Tensor out = at::empty({rows, out_features}, x.options().dtype(at::kFloat));
  if (rows == 0) return out;
#if defined(__x86_64__)
  // bfloat16 on both sides where the CPU has the pair dot product: x stays bfloat16 (exactly
  // what it was), each product exact, the sums in float32 as below.
  if (kernel == DotKernel::kBest && x.scalar_type() == at::kBFloat16 &&
      weight.scalar_type() == at::kBFloat16 && has_native_bfloat16()) {
    const at::Tensor xb = x.contiguous();
    const c10::BFloat16* xp = xb.data_ptr<c10::BFloat16>();
    const c10::BFloat16* wp = weight.data_ptr<c10::BFloat16>();
    float* op = out.data_ptr<float>();
    at::parallel_for(0, out_features, 64, [&](std::int64_t begin, std::int64_t end) {
      dot_rows_bfloat16_pairs(xp, rows, wp, in, op, out_features, begin, end);
    });
    return out;
  }
#endif
  const at::Tensor xf = x.to(at::kFloat).contiguous();
  const float* xp = xf.data_ptr<float>();
  float* op = out.data_ptr<float>();
  // Each thread takes whole weight rows: at least 64 per task, so a task reads ≥ 64 KiB.
  at::parallel_for(0, out_features, 64, [&](std::int64_t begin, std::int64_t end) {
    if (weight.scalar_type() == at::kFloat) {
      dot_rows(kernel, xp, rows, weight.data_ptr<float>(), in, in, op, out_features, begin, end);
    } else {
      dot_rows(kernel, xp, rows, weight.data_ptr<c10::BFloat16>(), in, in, op, out_features, begin,
               end);
    }
  });
  return out;
}

at::Tensor apply_linear(const at::Tensor& x, const at::Tensor& weight,
                        std::optional<at::ScalarType> out) {
  const at::ScalarType result = out.value_or(x.scalar_type());
  if (x.device().is_cpu() && x.dim() == 2 && x.size(0) == 1 && x.scalar_type() == at::kFloat &&
      weight.scalar_type() == at::kFloat) {
    return at::mv(weight, x[0]).unsqueeze(0).to(result);
  }
  if (x.device().is_cpu() && x.scalar_type() == at::kBFloat16 &&
      weight.scalar_type() == at::kBFloat16 && result == at::kBFloat16 && has_native_bfloat16() &&
      (x.dim() != 2 || x.size(0) >= kNativeBfloat16Rows)) {
    return at::matmul(x, weight.t());
  }
  const bool small_enough =
      weight.scalar_type() != at::kFloat || x.dim() != 2 || x.size(0) <= kSmallBatchRowsFloat32;
  if (small_batch_applies(x, weight) && x.size(0) > 0 && small_enough) {
    return small_batch_linear(x, weight).to(result);
  }
  if (x.device().is_cpu() && x.scalar_type() == at::kBFloat16) {
    return at::matmul(x.to(at::kFloat), weight.to(at::kFloat).t()).to(result);
  }
  return at::matmul(x, weight.to(x.scalar_type()).t()).to(result);
}

}  // namespace hotswap::model_loader
