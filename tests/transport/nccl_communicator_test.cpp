// The NCCL communicator: its dtype mapping everywhere; its argument checks and its failure
// without a GPU here; where a GPU is present (scripts/gpu-check.sh), a one-rank group's
// collectives and their ordering after the caller's stream. A one-rank collective moves no
// bytes, so its values cannot show that NCCL ran: the ordering can, since a call that returned
// without waiting for the collective would return before the caller's slow work is done.
#include "transport/nccl_communicator.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/TensorOperators.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#ifdef HOTSWAP_TORCH_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

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

#ifdef HOTSWAP_TORCH_HAS_CUDA
BOOST_AUTO_TEST_CASE(a_collective_starts_after_the_callers_side_stream_and_returns_after_it) {
  if (transport::gpu_runtime_info().device_count == 0) return;  // the case above said why
  transport::NcclCommunicator comm({transport::new_nccl_unique_id(), 0, 1, 0, 30s});
  auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
  // A trainer that writes its tensors on a side stream: tens of milliseconds of matmuls, then
  // the write, all queued there and none finished when the call is made.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  at::Tensor x = at::zeros({1 << 20}, cuda.dtype(at::kFloat));
  cudaEvent_t written = nullptr;
  BOOST_REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == cudaSuccess);
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    at::Tensor m = at::randn({4096, 4096}, cuda.dtype(at::kFloat)) / 128;  // shrinks to 0
    for (int i = 0; i < 24; ++i)
      m = at::matmul(m, m);
    x.fill_(3.0);
    x.add_(m.sum() * 0);  // the write depends on the slow work, whatever the scheduler does
    BOOST_REQUIRE(cudaEventRecord(written, side.stream()) == cudaSuccess);
    BOOST_TEST((cudaEventQuery(written) == cudaErrorNotReady));  // still queued
    comm.all_reduce_sum(x, 10s);
    // Returned: the collective ran after the write, and has finished.
    BOOST_TEST((cudaEventQuery(written) == cudaSuccess));
    comm.broadcast(x, 0, 10s);
  }
  BOOST_TEST(x.sum().item<double>() == 3.0 * (1 << 20));
  cudaEventDestroy(written);
}
#endif

#endif

BOOST_AUTO_TEST_SUITE_END()
