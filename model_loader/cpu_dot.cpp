#include "model_loader/cpu_dot.hpp"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace hotswap::model_loader {
namespace {

// Rows of up to this many columns (attention heads' keys) take dot_short_rows_avx2; longer ones
// (linear layers' weights) amortize a horizontal sum per output over the row.
constexpr std::int64_t kShortRow = 128;

inline float widen(float v) {
  return v;
}
inline float widen(c10::BFloat16 v) {
  std::uint32_t bits = static_cast<std::uint32_t>(v.x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// Portable, vectorized by the compiler for the build's baseline ISA: eight partial sums, so that
// the loop has independent lanes without reassociating float additions.
template <class W>
void dot_rows_portable(const float* x, std::int64_t rows, const W* w, std::int64_t w_stride,
                       std::int64_t in, float* out, std::int64_t out_stride, std::int64_t begin,
                       std::int64_t end) {
  for (std::int64_t j = begin; j < end; ++j) {
    const W* wj = w + j * w_stride;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      float acc[8] = {};
      std::int64_t k = 0;
      for (; k + 8 <= in; k += 8)
        for (int u = 0; u < 8; ++u)
          acc[u] += xr[k + u] * widen(wj[k + u]);
      float sum = 0;
      for (; k < in; ++k)
        sum += xr[k] * widen(wj[k]);
      for (float a : acc)
        sum += a;
      out[r * out_stride + j] = sum;
    }
  }
}

template <class V>
void add_weighted_rows_portable(float* acc, const float* weights, std::int64_t count, const V* v,
                                std::int64_t v_stride, std::int64_t n) {
  for (std::int64_t i = 0; i < count; ++i)
    for (std::int64_t k = 0; k < n; ++k)
      acc[k] += weights[i] * widen(v[i * v_stride + k]);
}

#if defined(__x86_64__)
bool has_avx2_fma() {
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
}

__attribute__((target("avx2,fma"))) inline __m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}
__attribute__((target("avx2,fma"))) inline __m256 load8(const c10::BFloat16* p) {
  // bfloat16 is float32's upper half: widen by shifting into place.
  __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

__attribute__((target("avx2,fma"))) inline float horizontal_sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// As dot_rows_portable, with AVX2 and FMA: one w row at a time, read once for every row of x
// (whose float32 copies stay in cache), 16 columns per iteration. (Reading two or four weight
// rows side by side measured slower for linear layers: 3.4–6 against 8.4–8.9 GB/s of bfloat16.)
// Rows shorter than kPrefetchBytes (an attention head's keys) are not worth the hint.
template <class W>
__attribute__((target("avx2,fma"))) void dot_rows_avx2(const float* x, std::int64_t rows,
                                                       const W* w, std::int64_t w_stride,
                                                       std::int64_t in, float* out,
                                                       std::int64_t out_stride, std::int64_t begin,
                                                       std::int64_t end) {
  const std::int64_t vector_end = in - in % 16;
  const bool prefetch = in * static_cast<std::int64_t>(sizeof(W)) > kPrefetchBytes;
  for (std::int64_t j = begin; j < end; ++j) {
    const W* wj = w + j * w_stride;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
      for (std::int64_t k = 0; k < vector_end; k += 16) {
        if (prefetch && r == 0) {
          _mm_prefetch(reinterpret_cast<const char*>(wj + k) + kPrefetchBytes, _MM_HINT_T0);
        }
        a = _mm256_fmadd_ps(load8(wj + k), _mm256_loadu_ps(xr + k), a);
        b = _mm256_fmadd_ps(load8(wj + k + 8), _mm256_loadu_ps(xr + k + 8), b);
      }
      float sum = horizontal_sum(_mm256_add_ps(a, b));
      for (std::int64_t k = vector_end; k < in; ++k)
        sum += xr[k] * widen(wj[k]);
      out[r * out_stride + j] = sum;
    }
  }
}

// As dot_rows_avx2 for short rows (an attention head's keys: 64 or 128 columns): eight w rows
// at a time against each row of x, one accumulator each, summed together by sum8. One w row at
// a time, a horizontal sum per output cost as much as the products of a 64-column row.
template <class W>
__attribute__((target("avx2,fma"))) void dot_short_rows_avx2(const float* x, std::int64_t rows,
                                                             const W* w, std::int64_t w_stride,
                                                             std::int64_t in, float* out,
                                                             std::int64_t out_stride,
                                                             std::int64_t begin, std::int64_t end) {
  const std::int64_t vector_end = in - in % 8;
  std::int64_t j = begin;
  for (; j + 8 <= end; j += 8) {
    const W* wj = w + j * w_stride;
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      __m256 acc[8];
      for (auto& a : acc)
        a = _mm256_setzero_ps();
      for (std::int64_t k = 0; k < vector_end; k += 8) {
        const __m256 xv = _mm256_loadu_ps(xr + k);
        for (int t = 0; t < 8; ++t)
          acc[t] = _mm256_fmadd_ps(load8(wj + t * w_stride + k), xv, acc[t]);
      }
      float sums[8];
      sum8(acc, sums);
      for (int t = 0; t < 8; ++t) {
        for (std::int64_t k = vector_end; k < in; ++k)
          sums[t] += xr[k] * widen(wj[t * w_stride + k]);
        out[r * out_stride + j + t] = sums[t];
      }
    }
  }
  if (j < end) dot_rows_avx2(x, rows, w, w_stride, in, out, out_stride, j, end);
}

// 32 columns at a time held in four registers across all the rows, so that the accumulator is
// loaded and stored once per 32 columns rather than once per row (an attention head's values:
// 64 columns, tens of rows). Then 8 at a time, then one.
template <class V>
__attribute__((target("avx2,fma"))) void add_weighted_rows_avx2(float* acc, const float* weights,
                                                                std::int64_t count, const V* v,
                                                                std::int64_t v_stride,
                                                                std::int64_t n) {
  std::int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + k), a1 = _mm256_loadu_ps(acc + k + 8);
    __m256 a2 = _mm256_loadu_ps(acc + k + 16), a3 = _mm256_loadu_ps(acc + k + 24);
    const V* vk = v + k;
    for (std::int64_t i = 0; i < count; ++i, vk += v_stride) {
      const __m256 w = _mm256_broadcast_ss(weights + i);
      a0 = _mm256_fmadd_ps(w, load8(vk), a0);
      a1 = _mm256_fmadd_ps(w, load8(vk + 8), a1);
      a2 = _mm256_fmadd_ps(w, load8(vk + 16), a2);
      a3 = _mm256_fmadd_ps(w, load8(vk + 24), a3);
    }
    _mm256_storeu_ps(acc + k, a0);
    _mm256_storeu_ps(acc + k + 8, a1);
    _mm256_storeu_ps(acc + k + 16, a2);
    _mm256_storeu_ps(acc + k + 24, a3);
  }
  for (; k + 8 <= n; k += 8) {
    __m256 a = _mm256_loadu_ps(acc + k);
    for (std::int64_t i = 0; i < count; ++i)
      a = _mm256_fmadd_ps(_mm256_broadcast_ss(weights + i), load8(v + i * v_stride + k), a);
    _mm256_storeu_ps(acc + k, a);
  }
  for (; k < n; ++k)
    for (std::int64_t i = 0; i < count; ++i)
      acc[k] += weights[i] * widen(v[i * v_stride + k]);
}
#endif

template <class W>
void dot_rows_any(DotKernel kernel, const float* x, std::int64_t rows, const W* w,
                  std::int64_t w_stride, std::int64_t in, float* out, std::int64_t out_stride,
                  std::int64_t begin, std::int64_t end) {
#if defined(__x86_64__)
  if (kernel == DotKernel::kBest && has_avx2_fma()) {
    if (in <= kShortRow)
      return dot_short_rows_avx2(x, rows, w, w_stride, in, out, out_stride, begin, end);
    return dot_rows_avx2(x, rows, w, w_stride, in, out, out_stride, begin, end);
  }
#endif
  dot_rows_portable(x, rows, w, w_stride, in, out, out_stride, begin, end);
}

template <class V>
void add_weighted_rows_any(DotKernel kernel, float* acc, const float* weights, std::int64_t count,
                           const V* v, std::int64_t v_stride, std::int64_t n) {
#if defined(__x86_64__)
  if (kernel == DotKernel::kBest && has_avx2_fma())
    return add_weighted_rows_avx2(acc, weights, count, v, v_stride, n);
#endif
  add_weighted_rows_portable(acc, weights, count, v, v_stride, n);
}

}  // namespace

void dot_rows(DotKernel kernel, const float* x, std::int64_t rows, const float* w,
              std::int64_t w_stride, std::int64_t in, float* out, std::int64_t out_stride,
              std::int64_t begin, std::int64_t end) {
  dot_rows_any(kernel, x, rows, w, w_stride, in, out, out_stride, begin, end);
}

void dot_rows(DotKernel kernel, const float* x, std::int64_t rows, const c10::BFloat16* w,
              std::int64_t w_stride, std::int64_t in, float* out, std::int64_t out_stride,
              std::int64_t begin, std::int64_t end) {
  dot_rows_any(kernel, x, rows, w, w_stride, in, out, out_stride, begin, end);
}

void add_weighted_rows(DotKernel kernel, float* acc, const float* weights, std::int64_t count,
                       const float* v, std::int64_t v_stride, std::int64_t n) {
  add_weighted_rows_any(kernel, acc, weights, count, v, v_stride, n);
}

void add_weighted_rows(DotKernel kernel, float* acc, const float* weights, std::int64_t count,
                       const c10::BFloat16* v, std::int64_t v_stride, std::int64_t n) {
  add_weighted_rows_any(kernel, acc, weights, count, v, v_stride, n);
}

}  // namespace hotswap::model_loader
