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

BOOST_AUTO_TEST_SUITE_END()
