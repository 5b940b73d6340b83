#include "model_loader/linear.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>

#include "protocol/errors.hpp"

using namespace hotswap;

namespace {

// x Wᵀ in float64, from the same (already rounded) inputs: what every path must approach.
at::Tensor exact(const at::Tensor& x, const at::Tensor& w) {
  return at::matmul(x.to(at::kDouble), w.to(at::kDouble).t());
}

double max_relative_error(const at::Tensor& got, const at::Tensor& want) {
  return ((got.to(at::kDouble) - want).abs().max() / want.abs().max()).item<double>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(linear)

// Every row count the kernel takes, and widths that leave a tail after its 16- and 32-wide
// steps; x in float32 and in bfloat16 (which the AVX512-BF16 pair kernel takes as it is, where
// the CPU has it); the portable kernel too, which only CPUs without AVX2 would otherwise run.
BOOST_AUTO_TEST_CASE(small_batch_kernel_matches_float64_for_both_weight_dtypes) {
  for (auto [dtype, x_dtype] : std::vector<std::pair<at::ScalarType, at::ScalarType>>{
           {at::kFloat, at::kFloat}, {at::kBFloat16, at::kFloat}, {at::kBFloat16, at::kBFloat16}}) {
    for (std::int64_t rows : {1, 2, 3, 5, 8}) {
      for (std::int64_t in : {16, 37, 64, 200}) {
        at::Tensor w = at::randn({67, in}).to(dtype);
        at::Tensor x = at::randn({rows, in}).to(x_dtype);
        for (auto kernel : {model_loader::DotKernel::kBest, model_loader::DotKernel::kPortable}) {
          at::Tensor y = model_loader::small_batch_linear(x, w, kernel);
          BOOST_TEST(y.scalar_type() == at::kFloat);
          BOOST_TEST(y.sizes().vec() == (std::vector<std::int64_t>{rows, 67}));
          BOOST_TEST(max_relative_error(y, exact(x, w)) < 1e-5,
                     c10::toString(dtype)
                         << " x " << c10::toString(x_dtype) << " rows " << rows << " in " << in
                         << " portable " << (kernel == model_loader::DotKernel::kPortable));
        }
      }
    }
  }
}

// Whatever path a shape takes (the kernel, MKL on slices, a float32 copy of a bfloat16 weight,
// plain matmul), the result is x's dtype (or the one asked for) and rounded once from float32.
BOOST_AUTO_TEST_CASE(every_path_rounds_once_to_the_dtype_asked) {
  for (std::int64_t rows : {1, 4, 8, 9, 40}) {
    at::Tensor w = at::randn({33, 48}).to(at::kBFloat16);
    at::Tensor x = at::randn({rows, 48}).to(at::kBFloat16);
    at::Tensor want = exact(x, w);
    at::Tensor y = model_loader::apply_linear(x, w);
    BOOST_TEST(y.scalar_type() == at::kBFloat16);
    // One rounding to bfloat16: within half an ulp of 8 bits of mantissa, relative.
    BOOST_TEST(
        ((y.to(at::kDouble) - want).abs() <= want.abs() * (1.0 / 256) + 1e-6).all().item<bool>(),
        "rows " << rows);
    at::Tensor logits = model_loader::apply_linear(x, w, at::kFloat);
    BOOST_TEST(logits.scalar_type() == at::kFloat);
    BOOST_TEST(max_relative_error(logits, want) < 1e-5, "rows " << rows);

    at::Tensor wf = w.to(at::kFloat), xf = x.to(at::kFloat);
    BOOST_TEST(max_relative_error(model_loader::apply_linear(xf, wf), want) < 1e-5);
  }
}

// A decode step's float32 rows go to MKL on a slice of the weight per thread: every column of
// every slice written (widths that leave a part block of 16), a bfloat16 weight widened slice by
// slice, and the same products on one thread and inside a parallel region (where it does not
// split), up to the rows where MKL's own split takes over.
BOOST_AUTO_TEST_CASE(float32_rows_split_between_threads_match_float64) {
  const int threads = at::get_num_threads();
  for (std::int64_t out : {17, 131, 1000}) {
    for (std::int64_t rows : std::vector<std::int64_t>{5, 9, 64, model_loader::kSplitColumnsRows,
                                                       model_loader::kSplitColumnsRows + 1}) {
      for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
        at::Tensor w = at::randn({out, 72}).to(dtype);
        at::Tensor x = at::randn({rows, 72});
        const at::Tensor want = exact(x, w);
        for (int use : {2, 1}) {
          at::set_num_threads(use);
          at::Tensor y = model_loader::apply_linear(x, w);
          BOOST_TEST(y.scalar_type() == at::kFloat);
          BOOST_TEST(y.sizes().vec() == (std::vector<std::int64_t>{rows, out}));
          BOOST_TEST(max_relative_error(y, want) < 1e-5,
                     "rows " << rows << " out " << out << " threads " << use);
        }
        at::set_num_threads(2);
        at::Tensor nested;
        at::parallel_for(0, 1, 1, [&](std::int64_t, std::int64_t) {
          nested = model_loader::apply_linear(x, w);
        });
        BOOST_TEST(max_relative_error(nested, want) < 1e-5, "nested, rows " << rows);
      }
    }
  }
  at::set_num_threads(threads);
}

// A float32 result from more bfloat16 rows than the small-batch kernel takes (a 64-sequence
// decode step's logits, a product before its bias): on every path close to float64, and where
// the CPU has AVX512-BF16, each row exactly what it would be alone, whatever the batch (the
// pair kernel sums every row the same way), up to the rows where sgemm takes over.
BOOST_AUTO_TEST_CASE(many_bfloat16_rows_with_a_float32_result_match_each_row_alone) {
  for (std::int64_t in : {48, 96, 200}) {
    at::Tensor w = at::randn({131, in}).to(at::kBFloat16);
    for (std::int64_t rows : std::vector<std::int64_t>{9, 17, 64, model_loader::kPairKernelRows,
                                                       model_loader::kPairKernelRows + 1}) {
      at::Tensor x = at::randn({rows, in}).to(at::kBFloat16);
      at::Tensor y = model_loader::apply_linear(x, w, at::kFloat);
      BOOST_TEST(y.scalar_type() == at::kFloat);
      BOOST_TEST(max_relative_error(y, exact(x, w)) < 1e-5, "rows " << rows << " in " << in);
      if (!model_loader::has_native_bfloat16() || rows > model_loader::kPairKernelRows) continue;
      for (std::int64_t r : {std::int64_t{0}, rows / 2, rows - 1}) {
        at::Tensor alone = model_loader::apply_linear(x.narrow(0, r, 1), w, at::kFloat);
        BOOST_TEST(at::equal(alone[0], y[r]), "row " << r << " of " << rows << ", in " << in);
      }
    }
  }
  if (!model_loader::has_native_bfloat16())
    BOOST_TEST_MESSAGE("skipped the batch-invariance checks: this CPU has no AVX512-BF16");
}

BOOST_AUTO_TEST_CASE(small_batch_kernel_refuses_what_it_does_not_take) {
  at::Tensor w = at::randn({8, 16});
  BOOST_CHECK_THROW(model_loader::small_batch_linear(at::randn({9, 16}), w), protocol::ValueError);
  BOOST_CHECK_THROW(model_loader::small_batch_linear(at::randn({1, 15}), w), protocol::ValueError);
  BOOST_CHECK_THROW(model_loader::small_batch_linear(at::randn({1, 16}), w.to(at::kDouble)),
                    protocol::ValueError);
  BOOST_CHECK_THROW(model_loader::small_batch_linear(at::randn({1, 8}), w.t()),
                    protocol::ValueError);  // not contiguous
}

BOOST_AUTO_TEST_SUITE_END()
