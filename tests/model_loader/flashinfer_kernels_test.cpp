// The GPU kernel interface where no GPU runs it: which shapes it was instantiated for, and that
// a call fails with a status that says why instead of crashing (a build without the kernels
// answers kNotBuilt; a build with them, on a machine without a driver, the CUDA runtime's error).
// What the kernels compute is checked on a GPU (scripts/gpu-check.sh).
#include "model_loader/kernels/flashinfer_kernels.hpp"

#include <boost/test/unit_test.hpp>

#include <string>

#include "transport/device.hpp"

using namespace hotswap::model_loader::kernels;

BOOST_AUTO_TEST_SUITE(flashinfer_kernels)

BOOST_AUTO_TEST_CASE(attention_is_instantiated_for_the_head_dims_and_groups_it_lists) {
  BOOST_TEST(attention_head_dim_supported(64));
  BOOST_TEST(attention_head_dim_supported(128));
  BOOST_TEST(!attention_head_dim_supported(96));
  BOOST_TEST(!attention_head_dim_supported(256));
  for (std::uint32_t group : {1u, 2u, 3u, 4u, 6u, 8u, 16u}) {
    BOOST_TEST(decode_group_size_supported(group), group);
  }
  for (std::uint32_t group : {0u, 5u, 7u, 12u, 32u}) {
    BOOST_TEST(!decode_group_size_supported(group), group);
  }
}

BOOST_AUTO_TEST_CASE(a_call_without_a_gpu_fails_with_a_status_that_says_why) {
  const auto gpu = hotswap::transport::gpu_runtime_info();
  if (gpu.device_count > 0) return;  // a GPU here: the GPU check runs the kernels
  const KernelStatus status =
      rms_norm(KernelDType::kBFloat16, nullptr, nullptr, nullptr, 1, 128, 1e-6f, nullptr);
  BOOST_TEST(status != 0);
  const std::string said = describe_kernel_status(status);
  BOOST_TEST_MESSAGE("kernels built: " << kernels_built() << "; rms_norm without a GPU: " << said);
  if (kernels_built()) {
    BOOST_TEST(said.starts_with("cuda"), said);
  } else {
    BOOST_TEST(status == kNotBuilt);
    BOOST_TEST(said.find("no GPU kernels") != std::string::npos, said);
  }
}

BOOST_AUTO_TEST_CASE(empty_batches_launch_nothing) {
  // A step with no rows is a no-op on every build, GPU or not: nothing to launch.
  BOOST_TEST(silu_and_mul(KernelDType::kFloat16, nullptr, nullptr, 0, 64, nullptr) ==
             (kernels_built() ? 0 : kNotBuilt));
}

BOOST_AUTO_TEST_SUITE_END()
