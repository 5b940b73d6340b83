// plan_devices: which GPUs each replica's tensor-parallel ranks take, and the plans refused
// before any process starts (too few GPUs, two replicas on one GPU).
#include "worker/device_plan.hpp"

#include <boost/test/unit_test.hpp>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/errors.hpp"

using hotswap::protocol::ValueError;
using hotswap::worker::DevicePlan;
using hotswap::worker::plan_devices;

namespace {

// A plan as text, "[1 2] []", so that a failed check shows both plans.
std::string shown(const DevicePlan& plan) {
  std::string text;
  for (const auto& ranks : plan) {
    text += text.empty() ? "[" : " [";
    for (std::size_t r = 0; r < ranks.size(); ++r)
      text += (r ? " " : "") + std::to_string(ranks[r]);
    text += "]";
  }
  return text;
}

// The message plan_devices refuses with; fails the test when it does not refuse.
std::string refusal(const std::vector<std::string>& devices, int tensor_parallel_size,
                    std::optional<int> count, std::string_view flag = "--device") {
  try {
    plan_devices(devices, tensor_parallel_size, count, flag);
  } catch (const ValueError& e) {
    return e.what();
  }
  BOOST_FAIL("plan_devices accepted the plan");
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(device_plan)

BOOST_AUTO_TEST_CASE(rank_r_of_a_replica_on_cuda_k_runs_on_cuda_k_plus_r) {
  BOOST_TEST(shown(plan_devices({"cuda:1"}, 2, 4)) == "[1 2]");
  BOOST_TEST(shown(plan_devices({"cuda:0", "cuda:2"}, 2, 8, "--devices")) == "[0 1] [2 3]");
  BOOST_TEST(shown(plan_devices({"cuda:3"}, 1, 8)) == "[3]");
}

BOOST_AUTO_TEST_CASE(a_plan_that_uses_the_last_gpu_exactly_fits) {
  BOOST_TEST(shown(plan_devices({"cuda:0", "cuda:2"}, 2, 4, "--devices")) == "[0 1] [2 3]");
  BOOST_TEST(shown(plan_devices({"cuda:0"}, 8, 8)) == "[0 1 2 3 4 5 6 7]");
}

BOOST_AUTO_TEST_CASE(bare_cuda_is_cuda_0) {
  BOOST_TEST(shown(plan_devices({"cuda"}, 2, 2)) == "[0 1]");
  BOOST_TEST(refusal({"cuda", "cuda:1"}, 2, 4, "--devices") ==
             "--devices: replicas 0 and 1 both use cuda:1 (replica 0: cuda:0..cuda:1 with "
             "--tensor-parallel-size 2; replica 1: cuda:1..cuda:2)");
}

BOOST_AUTO_TEST_CASE(too_few_gpus_for_the_tensor_parallel_ranks_names_the_devices_and_count) {
  BOOST_TEST(refusal({"cuda:1"}, 2, 2) ==
             "--device cuda:1 with --tensor-parallel-size 2 needs cuda:1..cuda:2, but this "
             "machine has 2 GPU(s) (cuda:0..cuda:1)");
  BOOST_TEST(refusal({"cuda:0", "cuda:2"}, 2, 3, "--devices") ==
             "--devices: replica 1 on cuda:2 with --tensor-parallel-size 2 needs cuda:2..cuda:3, "
             "but this machine has 3 GPU(s) (cuda:0..cuda:2)");
  BOOST_TEST(refusal({"cuda:1"}, 1, 1) ==
             "--device cuda:1 needs cuda:1, but this machine has 1 GPU(s) (cuda:0)");
}

BOOST_AUTO_TEST_CASE(no_gpu_refuses_every_cuda_device) {
  BOOST_TEST(refusal({"cuda"}, 1, 0) ==
             "--device cuda needs cuda:0, but this machine has 0 GPU(s)");
  BOOST_TEST(refusal({"cuda:0"}, 2, 0) ==
             "--device cuda:0 with --tensor-parallel-size 2 needs cuda:0..cuda:1, but this "
             "machine has 0 GPU(s)");
  BOOST_TEST(shown(plan_devices({"cpu"}, 2, 0)) == "[]");
}

BOOST_AUTO_TEST_CASE(replicas_whose_ranks_share_a_gpu_are_refused) {
  BOOST_TEST(refusal({"cuda:0", "cuda:1"}, 2, 4, "--devices") ==
             "--devices: replicas 0 and 1 both use cuda:1 (replica 0: cuda:0..cuda:1 with "
             "--tensor-parallel-size 2; replica 1: cuda:1..cuda:2)");
  BOOST_TEST(refusal({"cuda:0", "cuda:0"}, 1, 2, "--devices") ==
             "--devices: replicas 0 and 1 both use cuda:0");
  BOOST_TEST(refusal({"cuda:0", "cpu", "cuda:5", "cuda:3"}, 3, 8, "--devices") ==
             "--devices: replicas 2 and 3 both use cuda:5 (replica 2: cuda:5..cuda:7 with "
             "--tensor-parallel-size 3; replica 3: cuda:3..cuda:5)");
}

// The overlap is a fact of the flags: the same refusal on a machine with no GPU, with too few,
// and in a build that cannot count them.
BOOST_AUTO_TEST_CASE(overlap_is_refused_before_and_without_the_gpu_count) {
  const std::string expected = "--devices: replicas 0 and 1 both use cuda:0";
  for (std::optional<int> count : {std::optional<int>(0), std::optional<int>(1),
                                   std::optional<int>(), std::optional<int>(16)}) {
    BOOST_TEST(refusal({"cuda:0", "cuda:0"}, 1, count, "--devices") == expected);
  }
}

BOOST_AUTO_TEST_CASE(cpu_replicas_never_conflict) {
  BOOST_TEST(shown(plan_devices({"cpu", "cpu", "cpu"}, 4, 0, "--devices")) == "[] [] []");
  BOOST_TEST(shown(plan_devices({"cpu", "cuda:0", "cpu"}, 2, 2, "--devices")) == "[] [0 1] []");
}

BOOST_AUTO_TEST_CASE(an_unknown_gpu_count_checks_only_the_overlap) {
  BOOST_TEST(shown(plan_devices({"cuda:6"}, 4, std::nullopt)) == "[6 7 8 9]");
}

BOOST_AUTO_TEST_CASE(malformed_names_and_sizes_are_refused) {
  BOOST_TEST(refusal({"cuda:0", "gpu1"}, 1, 2, "--devices") ==
             "--devices gpu1: expected cpu, cuda or cuda:N");
  BOOST_TEST(refusal({"cuda:"}, 1, 2) == "--device cuda:: expected cpu, cuda or cuda:N");
  BOOST_TEST(refusal({"cuda:0"}, 0, 2) == "--tensor-parallel-size 0: must be at least 1");
}

BOOST_AUTO_TEST_SUITE_END()
