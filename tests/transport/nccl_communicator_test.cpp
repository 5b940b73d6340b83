// The NCCL communicator: its dtype mapping everywhere; its argument checks and its failure
// without a GPU here; a one-rank group's collectives where a GPU is present (scripts/gpu-check.sh).
#include "transport/nccl_communicator.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/empty.h>
#include <ATen/ops/ones.h>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "transport/device.hpp"

using namespace hotswap;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(nccl_communicator)

BOOST_AUTO_TEST_CASE(dtypes_map_as_vllms_nccl_enum_and_the_rest_travel_as_bytes) {
  auto of = [](at::ScalarType t, std::int64_t n) {
    return transport::nccl_elements_of(at::empty({n}, at::TensorOptions().dtype(t)));
  };
  BOOST_TEST(of(at::kBFloat16, 5).datatype == 9);
  BOOST_TEST(of(at::kBFloat16, 5).count == 5u);
  BOOST_TEST(of(at::kFloat, 2).datatype == 7);
  BOOST_TEST(of(at::kHalf, 2).datatype == 6);
  BOOST_TEST(of(at::kLong, 2).datatype == 4);
  BOOST_TEST(of(at::kByte, 2).datatype == 1);
  BOOST_TEST(of(at::kBool, 3).datatype == 1);  // no NCCL type: bytes
  BOOST_TEST(of(at::kShort, 3).count == 6u);
}

#ifdef HOTSWAP_WITH_CUDA

BOOST_AUTO_TEST_CASE(a_rank_outside_the_world_is_refused_before_any_cuda_call) {
  HOTSWAP_CHECK_THROW_MSG(transport::NcclCommunicator({{}, 2, 2, 0, 1s}), protocol::ValueError,
                          "NCCL rank 2 is outside world_size 2");
}

BOOST_AUTO_TEST_CASE(a_one_rank_group_runs_its_collectives_on_the_gpu_or_fails_clearly_without) {
  const auto gpu = transport::gpu_runtime_info();
  if (gpu.device_count == 0) {
    // No GPU here: the failure names the call and the reason.
    HOTSWAP_CHECK_THROW_MSG(transport::NcclCommunicator({{}, 0, 1, 0, 5s}), protocol::TransferError,
                            "cudaSetDevice(cuda_index(device)) failed");
    return;
  }
  transport::NcclCommunicator comm({transport::new_nccl_unique_id(), 0, 1, 0, 30s});
  auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
  at::Tensor x = at::ones({1000}, cuda.dtype(at::kBFloat16));
  comm.broadcast(x, 0, 10s);
  at::Tensor y = at::ones({4}, cuda.dtype(at::kFloat));
  comm.all_reduce_sum(y, 10s);
  BOOST_TEST(y.sum().item<float>() == 4.0f);
  at::Tensor on_cpu = at::ones({4});
  HOTSWAP_CHECK_THROW_MSG(comm.broadcast(on_cpu, 0, 1s), protocol::ValueError,
                          "moves GPU memory, but the tensor is on cpu");
  comm.abort();
  HOTSWAP_CHECK_THROW_MSG(comm.broadcast(x, 0, 1s), protocol::TransferError, "aborted");
}

#endif

BOOST_AUTO_TEST_SUITE_END()
