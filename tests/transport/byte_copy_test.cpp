// Bulk copies: every kernel gives memcpy's bytes at any size and alignment, and tensors that
// are not plain same-dtype CPU blocks go through libtorch's own copy.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <cstdint>
#include <vector>

#include "transport/byte_copy.hpp"

using namespace hotswap;
using transport::CopyKernel;

BOOST_AUTO_TEST_SUITE(byte_copy)

BOOST_AUTO_TEST_CASE(every_kernel_copies_exactly_the_bytes_at_any_size_and_alignment) {
  const std::size_t big = transport::kStreamingCopyBytes + 4099;
  std::vector<std::uint8_t> src(big + 64), dst(big + 128);
  for (std::size_t i = 0; i < src.size(); ++i)
    src[i] = static_cast<std::uint8_t>(i * 131 + 7);
  for (CopyKernel kernel : {CopyKernel::kBest, CopyKernel::kMemcpy, CopyKernel::kStreaming}) {
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{31}, std::size_t{127},
                              std::size_t{128}, std::size_t{129}, std::size_t{4097}, big}) {
      for (std::size_t src_offset : {0, 1, 17, 32}) {
        for (std::size_t dst_offset : {0, 3, 31, 64}) {
          std::fill(dst.begin(), dst.end(), 0xAA);
          transport::copy_bytes(dst.data() + dst_offset, src.data() + src_offset, bytes, kernel);
          bool same = std::equal(src.begin() + src_offset, src.begin() + src_offset + bytes,
                                 dst.begin() + dst_offset);
          // Not a byte before or after the destination range is touched.
          bool before = std::all_of(dst.begin(), dst.begin() + dst_offset,
                                    [](std::uint8_t b) { return b == 0xAA; });
          bool after = std::all_of(dst.begin() + dst_offset + bytes, dst.end(),
                                   [](std::uint8_t b) { return b == 0xAA; });
          BOOST_TEST((same && before && after), "kernel " << static_cast<int>(kernel) << ", "
                                                          << bytes << " bytes, src+" << src_offset
                                                          << ", dst+" << dst_offset);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(tensor_copies_take_the_byte_path_or_libtorch_s_and_agree) {
  // Large enough to be split over libtorch's threads.
  at::Tensor src = at::arange(3 << 20, at::TensorOptions().dtype(at::kFloat));
  at::Tensor dst = at::zeros_like(src);
  transport::copy_tensor(dst, src);
  BOOST_TEST(at::equal(dst, src));
  // Rows of a larger tensor, as a worker's staged slots are.
  at::Tensor rows = at::zeros({4, 1 << 20}, at::TensorOptions().dtype(at::kFloat));
  transport::copy_tensor(rows.narrow(0, 1, 2), src.narrow(0, 0, 2 << 20).view({2, 1 << 20}));
  BOOST_TEST(at::equal(rows.narrow(0, 1, 2).reshape({-1}), src.narrow(0, 0, 2 << 20)));
  BOOST_TEST(rows[0].abs().sum().item<float>() == 0.0f);
  BOOST_TEST(rows[3].abs().sum().item<float>() == 0.0f);
  // A conversion and a transposed source go through libtorch's copy.
  at::Tensor square = at::arange(64, at::TensorOptions().dtype(at::kFloat)).view({8, 8});
  at::Tensor bf16 = at::empty({8, 8}, at::TensorOptions().dtype(at::kBFloat16));
  transport::copy_tensor(bf16, square);
  BOOST_TEST(at::equal(bf16.to(at::kFloat), square));
  at::Tensor transposed = at::empty({8, 8}, at::TensorOptions().dtype(at::kFloat));
  transport::copy_tensor(transposed, square.t());
  BOOST_TEST(at::equal(transposed, square.t()));
  // A tensor onto itself is left as it is.
  transport::copy_tensor(square, square);
  BOOST_TEST(square[7][7].item<float>() == 63.0f);
}

BOOST_AUTO_TEST_SUITE_END()
