// The NCCL communicator: its dtype mapping everywhere; its argument checks and its failure
// without a GPU here; where a GPU is present (scripts/gpu-check.sh), a one-rank group; where two
// are, a two-rank group.
//
// A one-rank collective moves no bytes (it leaves its tensor as it was), so the one-rank cases
// check no values: that the collectives complete within their timeouts, what is refused, and the
// ordering after the caller's stream, which a call that returned without waiting for the
// collective would break. The values are checked by the two-rank suite, one rank per GPU, where
// a collective that moved nothing leaves each rank's tensor unlike the expected one. It is a
// suite of its own because it ends with 77 (skipped) on a machine with fewer than two GPUs,
// which would hide the one-rank cases' results if they shared it.
#include "transport/nccl_communicator.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/full.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>
#ifdef HOTSWAP_TORCH_HAS_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <vector>

#include "needs_gpus.hpp"
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

// Completion and refusals, not values: a one-rank broadcast or all-reduce leaves its tensor as
// it was whether NCCL ran or not.
BOOST_AUTO_TEST_CASE(a_one_rank_group_runs_its_collectives_on_the_gpu_or_fails_clearly_without) {
  const auto gpu = transport::gpu_runtime_info();
  if (gpu.device_count == 0) {
    // No GPU here: the failure names the call and the reason, then the call's site in
    // hotswap's tree, never the folder the build machine compiled it in.
    try {
      transport::NcclCommunicator comm({{}, 0, 1, 0, 5s});
      BOOST_FAIL("a communicator started without a GPU");
    } catch (const protocol::TransferError& e) {
      const std::string message = e.what();
      BOOST_TEST(message.starts_with("cudaSetDevice("), message);
      BOOST_TEST(message.find(") failed: cudaError") != std::string::npos, message);
      BOOST_TEST(message.find("[at transport/") != std::string::npos, message);
      BOOST_TEST(message.find(HOTSWAP_SOURCE_ROOT) == std::string::npos, message);
    }
    return;
  }
  // Init, then the warm-up all-reduce, within the timeout.
  transport::NcclCommunicator comm({transport::new_nccl_unique_id(), 0, 1, 0, 30s});
  if (!at::hasCUDA()) {
    std::printf(
        "not run here: the collectives of %s need a libtorch built with CUDA, found a "
        "CPU-only one\n",
        boost::unit_test::framework::current_test_case().p_name.get().c_str());
    return;
  }
  auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
  at::Tensor x = at::ones({1000}, cuda.dtype(at::kBFloat16));
  BOOST_CHECK_NO_THROW(comm.broadcast(x, 0, 10s));  // completed on the device within 10 s
  at::Tensor y = at::ones({4}, cuda.dtype(at::kFloat));
  BOOST_CHECK_NO_THROW(comm.all_reduce_sum(y, 10s));
  at::Tensor on_cpu = at::ones({4});
  HOTSWAP_CHECK_THROW_MSG(comm.broadcast(on_cpu, 0, 1s), protocol::ValueError,
                          "moves GPU memory, but the tensor is on cpu");
  comm.abort();
  HOTSWAP_CHECK_THROW_MSG(comm.broadcast(x, 0, 1s), protocol::TransferError, "aborted");
}

#ifdef HOTSWAP_TORCH_HAS_CUDA
// Ordering, not values: the write the collective must wait for is the caller's own.
BOOST_AUTO_TEST_CASE(a_collective_starts_after_the_callers_side_stream_and_returns_after_it) {
  const auto gpu = transport::gpu_runtime_info();
  if (gpu.device_count == 0) {
    std::printf("not run here: %s needs 1 GPU, found 0%s%s\n",
                boost::unit_test::framework::current_test_case().p_name.get().c_str(),
                gpu.device_error.empty() ? "" : ": ", gpu.device_error.c_str());
    return;
  }
  transport::NcclCommunicator comm({transport::new_nccl_unique_id(), 0, 1, 0, 30s});
  auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
  // A trainer that writes its tensors on a side stream: tens of milliseconds of matmuls, then
  // the write, all queued there and none finished when the call is made.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, 0);
  at::Tensor x = at::zeros({1 << 20}, cuda.dtype(at::kFloat));
  cudaEvent_t written = nullptr;
  BOOST_REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == cudaSuccess);
  // Tens of milliseconds of matmuls queued on the current stream, a matrix that shrinks to 0.
  auto slow_work = [&] {
    at::Tensor m = at::randn({4096, 4096}, cuda.dtype(at::kFloat)) / 128;
    for (int i = 0; i < 24; ++i)
      m = at::matmul(m, m);
    return m.sum() * 0;
  };
  {
    c10::cuda::CUDAStreamGuard on_side(side);
    // Once untimed: the first launch of a kernel loads its module (CUDA's lazy loading), which
    // can wait for the whole device, so on a fast GPU the matmuls were done before the first
    // query below (seen on an H200). Loaded now, every launch after this one is only queued.
    x.add_(slow_work());
    BOOST_REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    x.fill_(3.0);
    x.add_(slow_work());  // the write depends on the slow work, whatever the scheduler does
    BOOST_REQUIRE(cudaEventRecord(written, side.stream()) == cudaSuccess);
    BOOST_TEST(cudaEventQuery(written) == cudaErrorNotReady);  // still queued
    comm.all_reduce_sum(x, 10s);
    // Returned: the collective ran after the write, and has finished.
    BOOST_TEST(cudaEventQuery(written) == cudaSuccess);
    comm.broadcast(x, 0, 10s);
    // Queued (a tensor-parallel step's): the host goes on at once, the caller's stream waits.
    x.add_(slow_work());
    BOOST_REQUIRE(cudaEventRecord(written, side.stream()) == cudaSuccess);
    comm.queue_all_reduce_sum(x, 10s);
    BOOST_TEST(cudaEventQuery(written) == cudaErrorNotReady, "queue_all_reduce_sum waited");
    comm.wait_queued(10s);
    BOOST_TEST(cudaEventQuery(written) == cudaSuccess);
    comm.wait_queued(10s);  // nothing queued: returns at once
  }
  // Read on the default stream: the side stream's write is there once the calls have returned.
  BOOST_TEST(x.sum().item<double>() == 3.0 * (1 << 20));
  cudaEventDestroy(written);
}
#endif

#endif

BOOST_AUTO_TEST_SUITE_END()

namespace {

#ifndef HOTSWAP_WITH_CUDA
struct TwoGpus {};  // a build without CUDA: the suite checks the refusal, on any machine
#else

using TwoGpus = testing::NeedsGpus<2>;

// Rank r of a fresh two-rank group on cuda:r, each on a thread of its own (a rank's calls block
// until its peer's match them). `rank_body(comm, on_rank)`, with `on_rank` the options of a tensor
// on that rank's GPU, returns what the rank ends with; it comes back here on the CPU, by rank, to
// be checked on this thread (Boost.Test's assertions are not thread-safe). A rank's failure is
// rethrown once its peer has failed too, within its own timeout.
template <class RankBody>
std::vector<at::Tensor> on_two_gpus(RankBody rank_body) {
  const auto id = transport::new_nccl_unique_id();
  std::vector<std::future<at::Tensor>> ranks;
  for (int rank = 0; rank < 2; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&rank_body, id, rank] {
      transport::NcclCommunicator comm({id, rank, 2, /*device=*/rank, 30s});
      auto on_rank = at::TensorOptions().device(c10::Device(c10::kCUDA, rank));
      return rank_body(comm, on_rank).cpu();
    }));
  }
  std::vector<at::Tensor> out;
  for (auto& rank : ranks)
    out.push_back(rank.get());
  return out;
}
#endif

}  // namespace

// One CTest test of its own (transport.nccl_communicator_two_gpus), skipped without two GPUs.
BOOST_FIXTURE_TEST_SUITE(nccl_communicator_two_gpus, TwoGpus)

#ifndef HOTSWAP_WITH_CUDA
// A build without CUDA has no group to form, on any number of GPUs, and says how to get one.
BOOST_AUTO_TEST_CASE(a_build_without_cuda_refuses_to_mint_the_groups_unique_id) {
  HOTSWAP_CHECK_THROW_MSG(transport::new_nccl_unique_id(), protocol::ValueError,
                          "a GPU build of hotswap");
}
#else

BOOST_AUTO_TEST_CASE(a_broadcast_lands_the_roots_values_on_the_other_gpu_from_either_root) {
  const std::int64_t n = 1 << 16;
  for (int root : {0, 1}) {
    // The root holds 0, 1, 2, …; the other rank -1 everywhere, which no element sent is.
    auto held = on_two_gpus([&](transport::NcclCommunicator& comm, at::TensorOptions on_rank) {
      at::Tensor x = comm.rank() == root ? at::arange(n, on_rank.dtype(at::kFloat))
                                         : at::full({n}, -1.0, on_rank.dtype(at::kFloat));
      comm.broadcast(x, root, 10s);
      return x;
    });
    const at::Tensor sent = at::arange(n, at::TensorOptions().dtype(at::kFloat));
    for (int rank : {0, 1})
      BOOST_TEST(at::equal(held[rank], sent), "root " << root << ", rank " << rank);
  }
}

// A dtype NCCL has no type for travels as bytes: the count scaled by the item size carries every
// element, not the first half of the bytes.
BOOST_AUTO_TEST_CASE(a_broadcast_of_a_dtype_without_an_nccl_type_carries_every_element) {
  const std::int64_t n = 4096;
  auto held = on_two_gpus([&](transport::NcclCommunicator& comm, at::TensorOptions on_rank) {
    // -2000 … 2095 from rank 0; -30000, which none of them is, on rank 1.
    at::Tensor x = comm.rank() == 0 ? at::arange(n, on_rank.dtype(at::kShort)) - 2000
                                    : at::full({n}, -30000, on_rank.dtype(at::kShort));
    comm.broadcast(x, 0, 10s);
    return x;
  });
  BOOST_TEST(at::equal(held[1], at::arange(n, at::TensorOptions().dtype(at::kShort)) - 2000));
}

BOOST_AUTO_TEST_CASE(an_all_reduce_leaves_both_gpus_the_sum_of_their_different_values) {
  const std::int64_t n = 1 << 16;
  // Rank r holds (r + 1) * [0, 1, 2, …]: the sum, 3 * [0, 1, 2, …], is neither rank's own.
  // Small integers, exact in bfloat16 too (up to 256).
  for (auto dtype : {at::kFloat, at::kBFloat16}) {
    const std::int64_t count = dtype == at::kFloat ? n : 80;
    auto held = on_two_gpus([&](transport::NcclCommunicator& comm, at::TensorOptions on_rank) {
      at::Tensor x = at::arange(count, on_rank.dtype(dtype)) * (comm.rank() + 1);
      comm.all_reduce_sum(x, 10s);
      return x;
    });
    const at::Tensor sum = at::arange(count, at::TensorOptions().dtype(dtype)) * 3;
    for (int rank : {0, 1}) {
      BOOST_TEST(at::equal(held[rank].to(at::kFloat), sum.to(at::kFloat)),
                 dtype << ", rank " << rank);
    }
  }
}

// A tensor-parallel step's way: queued, read by the next kernel on the caller's stream with no
// host wait between, then one wait. The kernel must see the sum, not the rank's own values.
BOOST_AUTO_TEST_CASE(a_queued_all_reduce_is_summed_before_the_next_kernel_reads_it) {
  const std::int64_t n = 1 << 20;
  auto held = on_two_gpus([&](transport::NcclCommunicator& comm, at::TensorOptions on_rank) {
    at::Tensor x = at::arange(n, on_rank.dtype(at::kFloat)) * (comm.rank() + 1);
    comm.queue_all_reduce_sum(x, 10s);
    at::Tensor next = x * 2;  // queued behind the collective on this thread's stream
    comm.wait_queued(10s);
    return next;
  });
  const at::Tensor expected = at::arange(n, at::TensorOptions().dtype(at::kFloat)) * 6;
  for (int rank : {0, 1})
    BOOST_TEST(at::equal(held[rank], expected), "rank " << rank);
}

#endif

BOOST_AUTO_TEST_SUITE_END()
