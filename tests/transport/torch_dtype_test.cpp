#include "transport/torch_dtype.hpp"

#include <boost/test/unit_test.hpp>

#ifdef HOTSWAP_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include <torch/version.h>

#include <algorithm>
#include <vector>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "transport/device.hpp"

using namespace hotswap;
using protocol::DType;

BOOST_AUTO_TEST_SUITE(torch_dtype)

BOOST_AUTO_TEST_CASE(every_integer_and_float_type_round_trips_with_matching_item_size) {
  for (DType d : {DType::kFloat32, DType::kFloat16, DType::kBFloat16, DType::kFloat64, DType::kInt8,
                  DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool}) {
    c10::ScalarType t = transport::to_scalar_type(d);
    BOOST_TEST((transport::from_scalar_type(t) == d));
    BOOST_TEST(c10::elementSize(t) == protocol::item_size(d));
  }
}

BOOST_AUTO_TEST_CASE(float8_follows_the_libtorch_version) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  BOOST_TEST((transport::from_scalar_type(transport::to_scalar_type(DType::kFloat8E4M3FN)) ==
              DType::kFloat8E4M3FN));
#else
  HOTSWAP_CHECK_THROW_MSG(transport::to_scalar_type(DType::kFloat8E4M3FN), protocol::ValueError,
                          "dtype float8_e4m3fn needs libtorch >= 2.1");
#endif
}

BOOST_AUTO_TEST_CASE(types_without_a_wire_name_are_rejected_by_name) {
  HOTSWAP_CHECK_THROW_MSG(transport::from_scalar_type(c10::ScalarType::ComplexFloat),
                          protocol::ValueError, "has no name on vLLM's weight-transfer wire");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(device_sync)

BOOST_AUTO_TEST_CASE(cpu_synchronize_is_a_no_op) {
  BOOST_CHECK_NO_THROW(transport::synchronize_device(c10::Device(c10::kCPU)));
}

BOOST_AUTO_TEST_CASE(gpu_runtime_reports_what_the_build_and_machine_offer) {
  auto info = transport::gpu_runtime_info();
  BOOST_TEST_MESSAGE("built_with_cuda="
                     << info.built_with_cuda << " cuda=" << info.cuda_runtime_version
                     << " nccl=" << info.nccl_version << " devices=" << info.device_count << " ("
                     << info.device_error << ")");
  if (info.built_with_cuda) {
    BOOST_TEST(info.cuda_runtime_version > 0);
    BOOST_TEST(info.nccl_version > 0);
  }
  if (info.device_count == 0) {
    BOOST_TEST(!info.device_error.empty());
    // Without a GPU, a CUDA device is an error that says why, never a crash or a hang.
    BOOST_CHECK_THROW(transport::synchronize_device(c10::Device(c10::kCUDA, 0)), protocol::Error);
  } else {
    BOOST_CHECK_NO_THROW(transport::synchronize_device(c10::Device(c10::kCUDA, 0)));
  }
}

BOOST_AUTO_TEST_CASE(a_cuda_device_without_a_gpu_says_which_half_is_missing) {
  // The message a CPU-only libtorch gets, and the one a CUDA build on a machine without a driver
  // gets: the first wrongly stood for both (a CUDA build in CI was told its libtorch had no CUDA).
  transport::GpuRuntimeInfo no_driver;
  no_driver.built_with_cuda = true;
  no_driver.cuda_runtime_version = 13000;
  no_driver.device_error =
      "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version";
  BOOST_TEST(transport::why_no_cuda_device(false, no_driver) ==
             "this build's libtorch has no CUDA (it is a CPU-only libtorch); run with --device "
             "cpu, or build hotswap against a CUDA libtorch");
  BOOST_TEST(transport::why_no_cuda_device(true, no_driver) ==
             "libtorch has CUDA, but this machine offers no GPU: no NVIDIA driver is loaded, or "
             "it is older than CUDA 13.0 needs (cudaErrorInsufficientDriver: CUDA driver version "
             "is insufficient for CUDA runtime version); run with --device cpu");
  transport::GpuRuntimeInfo hidden = no_driver;
  hidden.device_error = "cudaErrorNoDevice: no CUDA-capable device is detected";
  BOOST_TEST(transport::why_no_cuda_device(true, hidden) ==
             "libtorch has CUDA, but this machine offers no GPU: the driver sees no device (is "
             "CUDA_VISIBLE_DEVICES empty?) (cudaErrorNoDevice: no CUDA-capable device is "
             "detected); run with --device cpu");
  BOOST_TEST(transport::why_no_cuda_device(true, transport::GpuRuntimeInfo{}) ==
             "libtorch has CUDA, but this machine offers no GPU: no NVIDIA driver is loaded, or "
             "no device is visible; run with --device cpu");
}

BOOST_AUTO_TEST_CASE(device_memory_is_a_cuda_devices_and_fails_clearly_without_one) {
  HOTSWAP_CHECK_THROW_MSG(transport::device_memory(c10::Device(c10::kCPU)), protocol::ValueError,
                          "device memory is asked of a CUDA device, not cpu");
  const auto info = transport::gpu_runtime_info();
  if (info.device_count > 0) {
    const auto memory = transport::device_memory(c10::Device(c10::kCUDA, 0));
    BOOST_TEST(memory.total > 0u);
    BOOST_TEST(memory.free <= memory.total);
  } else {
    BOOST_CHECK_THROW(transport::device_memory(c10::Device(c10::kCUDA, 0)), protocol::Error);
  }
}

BOOST_AUTO_TEST_CASE(parse_device_on_this_machine_names_the_real_reason) {
  const auto info = transport::gpu_runtime_info();
  if (info.device_count > 0) return;  // a GPU here: cuda:0 parses
  try {
    transport::parse_device("cuda:0");
    BOOST_FAIL("cuda:0 parsed on a machine without a GPU");
  } catch (const protocol::ValueError& e) {
    const std::string said = e.what();
    BOOST_TEST_MESSAGE(said);
#ifdef HOTSWAP_TORCH_HAS_CUDA
    BOOST_TEST(said.find("CPU-only") == std::string::npos, said);
    BOOST_TEST(said.find("offers no GPU") != std::string::npos, said);
#endif
    BOOST_TEST(said.starts_with("--device cuda:0: "), said);
  }
}

// A CUDA runtime in a table, for DeviceScope's logic without a GPU: what the thread's current
// device is, which devices have an active primary context, and every cudaSetDevice asked for.
struct FakeCudaRuntime {
  static inline int current = 0;
  static inline std::vector<int> active;
  static inline std::vector<int> made_current;
  static transport::CudaDeviceRuntime table() {
    return {
        [] { return current; },
        [](int index) { return std::find(active.begin(), active.end(), index) != active.end(); },
        [](int index) {
          made_current.push_back(index);
          current = index;
        }};
  }
  FakeCudaRuntime(int current_device, std::vector<int> active_contexts) {
    current = current_device;
    active = std::move(active_contexts);
    made_current.clear();
  }
};

BOOST_AUTO_TEST_CASE(a_fresh_thread_does_not_restore_gpu_0_it_never_used) {
  if (!transport::built_with_cuda()) return;  // a no-op without CUDA
  // cudaGetDevice says 0 on a fresh thread, with no context on GPU 0: restoring it would make one.
  FakeCudaRuntime fake(0, {2});
  const auto runtime = FakeCudaRuntime::table();
  {
    transport::DeviceScope scope(c10::Device(c10::kCUDA, 2), runtime);
    BOOST_TEST(FakeCudaRuntime::current == 2);
  }
  BOOST_TEST(FakeCudaRuntime::made_current == std::vector<int>{2}, "no cudaSetDevice(0) after");
}

BOOST_AUTO_TEST_CASE(a_device_in_use_before_the_scope_is_restored) {
  if (!transport::built_with_cuda()) return;
  FakeCudaRuntime fake(1, {1, 3});
  const auto runtime = FakeCudaRuntime::table();
  {
    transport::DeviceScope scope(c10::Device(c10::kCUDA, 3), runtime);
    BOOST_TEST(FakeCudaRuntime::current == 3);
  }
  BOOST_TEST(FakeCudaRuntime::made_current == (std::vector<int>{3, 1}));
  BOOST_TEST(FakeCudaRuntime::current == 1);
}

BOOST_AUTO_TEST_CASE(a_scope_on_the_current_device_or_the_cpu_sets_nothing) {
  if (!transport::built_with_cuda()) return;
  FakeCudaRuntime fake(2, {2});
  const auto runtime = FakeCudaRuntime::table();
  { transport::DeviceScope scope(c10::Device(c10::kCUDA, 2), runtime); }
  { transport::DeviceScope scope(c10::Device(c10::kCPU), runtime); }
  BOOST_TEST(FakeCudaRuntime::made_current.empty());
}

BOOST_AUTO_TEST_CASE(a_runtime_that_cannot_say_its_device_restores_nothing) {
  if (!transport::built_with_cuda()) return;
  FakeCudaRuntime fake(-1, {});
  const auto runtime = FakeCudaRuntime::table();
  { transport::DeviceScope scope(c10::Device(c10::kCUDA, 0), runtime); }
  BOOST_TEST(FakeCudaRuntime::made_current == std::vector<int>{0});
}

BOOST_AUTO_TEST_CASE(a_device_scope_sets_the_current_gpu_and_restores_the_one_before) {
  BOOST_CHECK_NO_THROW(transport::DeviceScope(c10::Device(c10::kCPU)));  // nothing to set
  BOOST_TEST(transport::cuda_index(c10::Device(c10::kCUDA)) == 0);
  BOOST_TEST(transport::cuda_index(c10::Device(c10::kCUDA, 3)) == 3);
  const auto info = transport::gpu_runtime_info();
  if (!info.built_with_cuda) return;  // a no-op without CUDA
  if (info.device_count == 0) {
    HOTSWAP_CHECK_THROW_MSG(transport::DeviceScope(c10::Device(c10::kCUDA, 0)),
                            protocol::TransferError, "cudaSetDevice(");
    return;
  }
#ifdef HOTSWAP_WITH_CUDA
  auto current = [] {
    int d = -1;
    cudaGetDevice(&d);
    return d;
  };
  const int last = info.device_count - 1;
  cudaSetDevice(0);
  // The real runtime's context question, which decides whether a scope restores: GPU 0's
  // primary context is live once a runtime call has used it.
  cudaFree(nullptr);
  BOOST_TEST(transport::cuda_device_runtime().has_primary_context(0));
  BOOST_TEST(transport::cuda_device_runtime().current() == 0);
  {
    transport::DeviceScope scope(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(last)));
    BOOST_TEST(current() == last);
    {
      transport::DeviceScope inner(c10::Device(c10::kCUDA, 0));
      BOOST_TEST(current() == 0);
    }
    BOOST_TEST(current() == last);
  }
  BOOST_TEST(current() == 0);
#endif
}

BOOST_AUTO_TEST_SUITE_END()
