// The fixture of a suite that needs GPUs: its first case, on a machine with fewer than `kGpus`
// GPUs or with a libtorch that cannot place tensors on them, ends the test process with 77,
// which CTest reports as skipped (SKIP_RETURN_CODE, tests/CMakeLists.txt's gpu block), after a
// line that says what the suite needed and what it found. The whole suite skips, so a suite holds
// cases of one GPU count: one that mixed counts would hide the smaller cases behind the skip.
#pragma once

#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "transport/device.hpp"

namespace hotswap::testing {

template <int kGpus>
struct NeedsGpus {
  NeedsGpus() {
    namespace framework = boost::unit_test::framework;
    const auto gpu = transport::gpu_runtime_info();
    const std::string suite =
        framework::get<boost::unit_test::test_suite>(framework::current_test_case().p_parent_id)
            .p_name.get();
    const char* gpus = kGpus == 1 ? "GPU" : "GPUs";
    if (gpu.device_count < kGpus) {
      std::printf("SKIPPED: %s needs %d %s, found %d%s%s\n", suite.c_str(), kGpus, gpus,
                  gpu.device_count, gpu.device_error.empty() ? "" : ": ", gpu.device_error.c_str());
      std::fflush(stdout);
      std::exit(77);
    }
    if (!at::hasCUDA()) {
      std::printf(
          "SKIPPED: %s needs a libtorch built with CUDA to use its %d %s, found a "
          "CPU-only one\n",
          suite.c_str(), kGpus, gpus);
      std::fflush(stdout);
      std::exit(77);
    }
  }
};

}  // namespace hotswap::testing
