// The vector loops that the CPU's linear layers and paged attention share: dot products of
// float32 rows against float32 or bfloat16 rows (bfloat16 widened to float32 on the fly, float32
// sums), and weighted sums of rows added into a float32 accumulator. Each has an AVX2 + FMA
// version, picked at run time where the CPU has them, and a portable one that runs everywhere (so
// that tests drive both on any machine).
#pragma once

#include <c10/util/BFloat16.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>

namespace hotswap::model_loader {

// How far ahead of its loads a kernel prefetches a long row it streams (a weight row): 1 KiB
// took the bfloat16 linear kernel from 8.3 to 9.7 GB/s; 256 B was too close, 4 KiB no better.
inline constexpr std::int64_t kPrefetchBytes = 1024;

// Which kernel: the fastest this CPU runs, or the portable one.
enum class DotKernel { kBest, kPortable };

// out[r * out_stride + j] = Σ_k<in x[r * in + k] · w[j * w_stride + k], for r < rows and j in
// [begin, end): each w row is read once for every row of x.
void dot_rows(DotKernel kernel, const float* x, std::int64_t rows, const float* w,
              std::int64_t w_stride, std::int64_t in, float* out, std::int64_t out_stride,
              std::int64_t begin, std::int64_t end);
void dot_rows(DotKernel kernel, const float* x, std::int64_t rows, const c10::BFloat16* w,
              std::int64_t w_stride, std::int64_t in, float* out, std::int64_t out_stride,
              std::int64_t begin, std::int64_t end);

// acc[k] += Σ_i<count weights[i] · v[i * v_stride + k] for k < n: a weighted sum of rows (an
// attention head's values, weighted by their probabilities) added into a float32 accumulator.
void add_weighted_rows(DotKernel kernel, float* acc, const float* weights, std::int64_t count,
                       const float* v, std::int64_t v_stride, std::int64_t n);
void add_weighted_rows(DotKernel kernel, float* acc, const float* weights, std::int64_t count,
                       const c10::BFloat16* v, std::int64_t v_stride, std::int64_t n);

#if defined(__x86_64__)
// Eight accumulators' lanes summed at once, sums[t] the sum of acc[t]'s eight: two rounds of
// pairwise adds that also transpose, then the two 128-bit halves added. Each sum is taken in the
// same order whichever of the eight are zeros.
__attribute__((target("avx"))) inline void sum8(const __m256* acc, float* sums) {
  const __m256 a = _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
  const __m256 b = _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
  _mm256_storeu_ps(
      sums, _mm256_add_ps(_mm256_permute2f128_ps(a, b, 0x20), _mm256_permute2f128_ps(a, b, 0x31)));
}
#endif

}  // namespace hotswap::model_loader
