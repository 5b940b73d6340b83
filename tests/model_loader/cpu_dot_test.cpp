#include "model_loader/cpu_dot.hpp"

#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

using namespace hotswap::model_loader;

BOOST_AUTO_TEST_SUITE(cpu_dot)

// A weighted sum of strided rows, both kernels, float32 and bfloat16 rows, against a float64 sum:
// widths that fill the 32-wide registers, leave an 8-wide tail, and leave a scalar tail; row
// counts from none to a block's worth.
BOOST_AUTO_TEST_CASE(weighted_rows_add_into_the_accumulator) {
  std::mt19937 random(5);
  std::normal_distribution<float> normal;
  for (std::int64_t n : {1, 7, 8, 31, 32, 64, 75}) {
    for (std::int64_t count : {0, 1, 3, 16}) {
      const std::int64_t stride = n + 5;
      std::vector<float> rows(static_cast<std::size_t>(std::max<std::int64_t>(count, 1) * stride));
      std::vector<c10::BFloat16> bf16_rows(rows.size());
      for (std::size_t i = 0; i < rows.size(); ++i) {
        bf16_rows[i] = c10::BFloat16(normal(random));
        rows[i] = static_cast<float>(bf16_rows[i]);  // the same values in both dtypes
      }
      std::vector<float> weights(static_cast<std::size_t>(count)),
          start(static_cast<std::size_t>(n));
      for (auto& w : weights)
        w = normal(random);
      for (auto& s : start)
        s = normal(random);
      std::vector<double> want(start.begin(), start.end());
      for (std::int64_t i = 0; i < count; ++i)
        for (std::int64_t k = 0; k < n; ++k)
          want[static_cast<std::size_t>(k)] += double{weights[static_cast<std::size_t>(i)]} *
                                               rows[static_cast<std::size_t>(i * stride + k)];
      for (DotKernel kernel : {DotKernel::kBest, DotKernel::kPortable}) {
        std::vector<float> f32 = start, bf16 = start;
        add_weighted_rows(kernel, f32.data(), weights.data(), count, rows.data(), stride, n);
        add_weighted_rows(kernel, bf16.data(), weights.data(), count, bf16_rows.data(), stride, n);
        for (std::size_t k = 0; k < want.size(); ++k) {
          BOOST_TEST_CONTEXT("n " << n << ", rows " << count << ", column " << k) {
            BOOST_TEST(std::abs(f32[k] - want[k]) < 1e-4 * (1 + std::abs(want[k])));
            BOOST_TEST(bf16[k] == f32[k]);  // same widened values, same order of sums
          }
        }
      }
    }
  }
}

// Dot products of x's rows against strided w rows, both kernels and both w dtypes, against a
// float64 sum: short rows (an attention head's keys, taken eight w rows at a time) with and
// without a tail, a long one, and w row counts that leave some of eight over.
BOOST_AUTO_TEST_CASE(dot_rows_match_float64_for_short_and_long_rows) {
  std::mt19937 random(9);
  std::normal_distribution<float> normal;
  for (std::int64_t in : {7, 37, 64, 128, 129, 300}) {
    for (std::int64_t count : {1, 8, 13, 16}) {
      const std::int64_t stride = in + 3, rows = 2;
      std::vector<float> w(static_cast<std::size_t>(count * stride)),
          x(static_cast<std::size_t>(rows * in));
      std::vector<c10::BFloat16> bf16_w(w.size());
      for (std::size_t i = 0; i < w.size(); ++i) {
        bf16_w[i] = c10::BFloat16(normal(random));
        w[i] = static_cast<float>(bf16_w[i]);
      }
      for (auto& v : x)
        v = normal(random);
      for (DotKernel kernel : {DotKernel::kBest, DotKernel::kPortable}) {
        // Outputs strided as the walk writes them: row r's scores a count apart, one left over.
        const std::int64_t out_stride = count + 1;
        std::vector<float> f32(static_cast<std::size_t>(rows * out_stride), -1.0f), bf16 = f32;
        dot_rows(kernel, x.data(), rows, w.data(), stride, in, f32.data(), out_stride, 0, count);
        dot_rows(kernel, x.data(), rows, bf16_w.data(), stride, in, bf16.data(), out_stride, 0,
                 count);
        for (std::int64_t r = 0; r < rows; ++r) {
          for (std::int64_t j = 0; j < count; ++j) {
            double want = 0;
            for (std::int64_t k = 0; k < in; ++k)
              want += double{x[static_cast<std::size_t>(r * in + k)]} *
                      w[static_cast<std::size_t>(j * stride + k)];
            const auto at = static_cast<std::size_t>(r * out_stride + j);
            BOOST_TEST_CONTEXT("in " << in << ", w rows " << count << ", row " << r << ", w row "
                                     << j << ", portable " << (kernel == DotKernel::kPortable)) {
              BOOST_TEST(std::abs(f32[at] - want) < 1e-4 * (1 + std::abs(want)));
              BOOST_TEST(bf16[at] == f32[at]);
            }
          }
          BOOST_TEST(f32[static_cast<std::size_t>(r * out_stride + count)] == -1.0f);  // untouched
        }
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
