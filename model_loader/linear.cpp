#include "model_loader/linear.hpp"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/mm.h>

#include <array>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "protocol/errors.hpp"

namespace hotswap::model_loader {
namespace {

#if defined(__x86_64__)
// The lanes of up to eight accumulators summed at once, each into sums[r]: halves added, then
// sum8 (cpu_dot.hpp). Rows past `count` are zeros, so that every row is summed in the same order
// whatever the count (a row's result does not depend on how many rows were multiplied with it).
__attribute__((target("avx512f,avx512bw,avx512bf16"))) inline void sum_lanes(const __m512* acc,
                                                                             int count,
                                                                             float* sums) {
  __m256 half[8];
  for (int r = 0; r < 8; ++r) {
    // The halves through memory: GCC 12's 512-to-256-bit casts and extracts (and its
    // _mm512_reduce_add_ps) trip its own -Wmaybe-uninitialized.
    alignas(64) float lanes[16];
    if (r < count) _mm512_store_ps(lanes, acc[r]);
    half[r] = r < count ? _mm256_add_ps(_mm256_load_ps(lanes), _mm256_load_ps(lanes + 8))
                        : _mm256_setzero_ps();
  }
  sum8(half, sums);
}

// bfloat16 rows of x against bfloat16 weights with AVX512-BF16's pair dot product (VDPBF16PS:
// the exact products of two bfloat16 pairs summed into float32 lanes), 32 columns per step. Each
// weight row is loaded once for all R rows of x, each row of x with an accumulator of its own;
// a width that is not a multiple of 32 ends with a masked load, zeros past the end. (Taking two
// weight rows at a time, each row of x loaded once for both, measured no faster.)
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
    alignas(32) float sums[8];
    sum_lanes(acc, R, sums);
    for (int r = 0; r < R; ++r)
      out[r * out_stride + j] = sums[r];
  }
}

using PairKernel = void (*)(const c10::BFloat16*, const c10::BFloat16*, std::int64_t, float*,
                            std::int64_t, std::int64_t, std::int64_t);

template <std::size_t... R>
constexpr std::array<PairKernel, sizeof...(R)> pair_kernels(std::index_sequence<R...>) {
  return {&dot_rows_bfloat16_pairs<static_cast<int>(R) + 1>...};
}

// Any number of rows: weight rows [begin, end) in tiles of about 16 KiB, and for each tile every
// block of up to kSmallBatchRows rows of x, so that a tile is read from memory once and from the
// cache for the other blocks. Each output is summed exactly as with one row of x (an accumulator
// of its own, the same lanes in the same order): a row's result does not depend on the batch.
void dot_rows_bfloat16_pairs(const c10::BFloat16* x, std::int64_t rows, const c10::BFloat16* w,
                             std::int64_t in, float* out, std::int64_t out_stride,
                             std::int64_t begin, std::int64_t end) {
  static constexpr auto kernels = pair_kernels(std::make_index_sequence<kSmallBatchRows>{});
  const std::int64_t tile =
      std::max<std::int64_t>(1, (16 << 10) / std::max<std::int64_t>(in * 2, 1));
  for (std::int64_t first = begin; first < end; first += tile) {
    const std::int64_t last = std::min(end, first + tile);
    for (std::int64_t r = 0; r < rows; r += kSmallBatchRows) {
      const std::int64_t block = std::min(kSmallBatchRows, rows - r);
      kernels[static_cast<std::size_t>(block - 1)](x + r * in, w, in, out + r * out_stride,
                                                   out_stride, first, last);
    }
  }
}
#endif

// Whether x [rows, in] and weight [out, in] are shapes the CPU's row kernels take: both on the
// CPU, up to `max_rows` rows, a contiguous float32 or bfloat16 weight.
bool row_kernels_apply(const at::Tensor& x, const at::Tensor& weight,
                       std::int64_t max_rows = kSmallBatchRows) {
  return x.device().is_cpu() && weight.device().is_cpu() && x.dim() == 2 && weight.dim() == 2 &&
         x.size(0) <= max_rows && x.size(1) == weight.size(1) && weight.is_contiguous() &&
         (weight.scalar_type() == at::kFloat || weight.scalar_type() == at::kBFloat16);
}

// x [rows, in] float32 against weight [out, in] (float32, or bfloat16 widened a slice at a time):
// float32 [rows, out] from MKL's sgemm, each intra-op thread taking one contiguous slice of the
// weight's rows (the result's columns, in blocks of 16: whole cache lines) and MKL running
// serially inside it. Given the rows itself, MKL splits them between its threads and each packs
// the whole weight: 64 rows against a 896 × 4,864 weight took 5.1–5.4 ms on two threads and 7.3
// on one, its slices 3.7–3.9 (the 256 × 1,408 of the serving bench's model: 490 against 330–390
// µs). From a few hundred rows on, MKL's own split is as good (2,048 rows: 106 against 103 ms).
at::Tensor split_columns_linear(const at::Tensor& x, const at::Tensor& weight) {
  const std::int64_t rows = x.size(0), out_features = weight.size(0);
  at::Tensor out = at::empty({rows, out_features}, x.options().dtype(at::kFloat));
  const at::Tensor xf = x.to(at::kFloat);
  constexpr std::int64_t kBlock = 16;
  at::parallel_for(0, (out_features + kBlock - 1) / kBlock, 1,
                   [&](std::int64_t begin, std::int64_t end) {
                     const std::int64_t first = begin * kBlock;
                     const std::int64_t count = std::min(out_features, end * kBlock) - first;
                     at::Tensor slice = out.narrow(1, first, count);
                     at::mm_out(slice, xf, weight.narrow(0, first, count).to(at::kFloat).t());
                   });
  return out;
}

#if defined(__x86_64__)
// x [rows, in] and weight [out, in], both bfloat16 and contiguous, on a CPU with AVX512-BF16:
// float32 [rows, out] from the pair kernel, across the intra-op threads by weight rows.
at::Tensor bfloat16_pairs_linear(const at::Tensor& x, const at::Tensor& weight) {
  const std::int64_t rows = x.size(0), in = x.size(1), out_features = weight.size(0);
  at::Tensor out = at::empty({rows, out_features}, x.options().dtype(at::kFloat));
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

}  // namespace

bool has_native_bfloat16() {
#if defined(__x86_64__)
  static const bool yes = __builtin_cpu_supports("avx512bf16") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f");
  return yes;
#else
  return false;
#endif
}

at::Tensor small_batch_linear(const at::Tensor& x, const at::Tensor& weight, DotKernel kernel) {
  if (!row_kernels_apply(x, weight)) {
    throw protocol::ValueError(
        "small_batch_linear takes up to " + std::to_string(kSmallBatchRows) +
        " rows of x [rows, in] and a contiguous float32 or bfloat16 weight [out, in] on the CPU");
  }
#if defined(__x86_64__)
  // bfloat16 on both sides where the CPU has the pair dot product: x stays bfloat16 (exactly
  // what it was), each product exact, the sums in float32 as below.
  if (kernel == DotKernel::kBest && x.scalar_type() == at::kBFloat16 &&
      weight.scalar_type() == at::kBFloat16 && has_native_bfloat16()) {
    return bfloat16_pairs_linear(x, weight);
  }
#endif
  const std::int64_t rows = x.size(0), in = x.size(1), out_features = weight.size(0);
  at::Tensor out = at::empty({rows, out_features}, x.options().dtype(at::kFloat));
  if (rows == 0) return out;
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
  if (x.device().is_cpu() && x.scalar_type() == at::kBFloat16 &&
      weight.scalar_type() == at::kBFloat16 && result == at::kBFloat16 && has_native_bfloat16() &&
      (x.dim() != 2 || x.size(0) >= kNativeBfloat16Rows)) {
    return at::matmul(x, weight.t());
  }
  const bool small_enough =
      weight.scalar_type() != at::kFloat || x.dim() != 2 || x.size(0) <= kSmallBatchRowsFloat32;
  if (row_kernels_apply(x, weight) && x.size(0) > 0 && small_enough) {
    return small_batch_linear(x, weight).to(result);
  }
#if defined(__x86_64__)
  // A float32 result (logits, a product before its bias) from bfloat16 rows, more than the
  // small-batch kernel takes: the pair kernel over blocks of rows, rather than a float32 copy
  // of the weight made per call (a Qwen2 LM head's 272 MB became 544 MB every decode step).
  if (result == at::kFloat && x.scalar_type() == at::kBFloat16 &&
      weight.scalar_type() == at::kBFloat16 && row_kernels_apply(x, weight, kPairKernelRows) &&
      has_native_bfloat16()) {
    return bfloat16_pairs_linear(x, weight);
  }
#endif
  // A decode step's rows in float32 (or bfloat16 without the CPU's own bfloat16 products): MKL
  // on a slice of the weight per thread, where there are threads to split between.
  if ((x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16) &&
      row_kernels_apply(x, weight, kSplitColumnsRows) && at::get_num_threads() > 1 &&
      !at::in_parallel_region()) {
    return split_columns_linear(x, weight).to(result);
  }
  if (x.device().is_cpu() && x.scalar_type() == at::kBFloat16) {
    return at::matmul(x.to(at::kFloat), weight.to(at::kFloat).t()).to(result);
  }
  return at::matmul(x, weight.to(x.scalar_type()).t()).to(result);
}

}  // namespace hotswap::model_loader
