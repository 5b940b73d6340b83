// hotswap-launch with real worker replicas: the ready line, ranks, a killed replica, shutdown,
// and the device plans it refuses before starting any.
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include "model_loader/model_test_support.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "transport/child_process.hpp"
#include "transport/device.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

struct Launch {
  testing::CheckpointDir ckpt{testing::tiny_config(model_loader::architectures::kLlama), 1300};
  int base = transport::pick_free_port("127.0.0.1", 2);  // replica r serves base + r
  transport::ChildProcess launcher;
  json ready;

  explicit Launch(const std::string& replicas = "2", const std::string& tensor_parallel = "1")
      : launcher(HOTSWAP_LAUNCH_BINARY,
                 {"--replicas", replicas, "--base-port", std::to_string(base),
                  "--tensor-parallel-size", tensor_parallel, "--", "--model",
                  ckpt.dir.path.string(), "--weight-transfer-config", R"({"backend": "disk"})"}) {
    auto deadline = std::chrono::steady_clock::now() + 60s;
    while (ready.is_null() && std::chrono::steady_clock::now() < deadline) {
      launcher.read_output(200ms);
      for (const auto& line : launcher.take_lines()) {
        if (line.starts_with("{")) ready = json::parse(line);
      }
      if (launcher.poll_exit()) break;
    }
    BOOST_REQUIRE_MESSAGE(!ready.is_null(), "no ready line: " << launcher.output());
  }
};

// One replica of two tensor-parallel ranks.
struct TensorParallelLaunch : Launch {
  TensorParallelLaunch() : Launch("1", "2") {}
};

}  // namespace

BOOST_AUTO_TEST_SUITE(launcher)

BOOST_FIXTURE_TEST_CASE(replicas_start_with_consecutive_ports_and_ranks, Launch) {
  BOOST_TEST(ready["endpoints"] == json({"tcp://127.0.0.1:" + std::to_string(base),
                                         "tcp://127.0.0.1:" + std::to_string(base + 1)}));
  for (int i = 0; i < 2; ++i) {
    trainer_sdk::RpcClient client(ready["endpoints"][i].get<std::string>(), 10s);
    BOOST_TEST(client.call("health")["data_parallel_rank"] == i);
    BOOST_TEST(client.call("get_world_size") == json({{"world_size", 2}}));
  }
  ::kill(launcher.pid(), SIGTERM);
  BOOST_TEST(launcher.wait_exit(30s).value_or(-2) == 0);
  for (const auto& pid : ready["pids"])
    BOOST_TEST(::kill(pid.get<pid_t>(), 0) == -1);
}

BOOST_FIXTURE_TEST_CASE(a_dead_replica_is_named_and_the_others_stop, Launch) {
  ::kill(ready["pids"][1].get<pid_t>(), SIGKILL);
  auto status = launcher.wait_exit(30s);
  BOOST_TEST(status.value_or(0) != 0);
  BOOST_TEST(launcher.output().find("replica 1 (tcp://127.0.0.1:" + std::to_string(base + 1) +
                                    ") exited") != std::string::npos);
  BOOST_TEST(::kill(ready["pids"][0].get<pid_t>(), 0) == -1);
}

BOOST_FIXTURE_TEST_CASE(a_replica_whose_tensor_parallel_rank_died_is_named_failed,
                        TensorParallelLaunch) {
  trainer_sdk::RpcClient client(ready["endpoints"][0].get<std::string>(), 10s);
  BOOST_TEST(client.call("get_world_size") == json({{"world_size", 2}}));
  const auto ranks = testing::children_of(ready["pids"][0].get<pid_t>());
  BOOST_REQUIRE_EQUAL(ranks.size(), 1u);
  ::kill(ranks[0], SIGKILL);
  auto status = launcher.wait_exit(30s);
  BOOST_TEST(status.value_or(0) != 0);
  BOOST_TEST(
      launcher.output().find("hotswap-launch: replica 0 (tcp://127.0.0.1:" + std::to_string(base) +
                             ") failed: tensor-parallel rank 1 (of 2) exited") != std::string::npos,
      launcher.output());
  BOOST_TEST(::kill(ready["pids"][0].get<pid_t>(), 0) == -1);
}

// Two replicas placed on one GPU by --devices would put two ranks of an nccl weight-transfer
// group there: refused before either starts, the same on every machine (the overlap is checked
// before, and without, the machine's GPU count).
BOOST_AUTO_TEST_CASE(replicas_that_share_a_gpu_are_refused_before_any_starts) {
  transport::ChildProcess launcher(
      HOTSWAP_LAUNCH_BINARY,
      {"--replicas", "2", "--devices", "cuda:0,cuda:0", "--", "--model", "/nonexistent"});
  const auto status = launcher.wait_exit(30s);
  while (launcher.read_output(100ms)) {
  }
  BOOST_TEST(status.value_or(-2) == 2, launcher.output());
  BOOST_TEST(
      launcher.output().find("hotswap-launch: --devices: replicas 0 and 1 both use cuda:0") !=
          std::string::npos,
      launcher.output());
  BOOST_TEST(launcher.output().find("[replica") == std::string::npos, launcher.output());
}

// A --device after -- (here in its --device=X spelling) names the GPU of every replica: one the
// machine lacks is refused before any starts. Replicas may share it (colocated workers).
BOOST_AUTO_TEST_CASE(a_shared_device_the_machine_lacks_is_refused_before_any_starts) {
  if (!transport::built_with_cuda()) return;  // no GPU count to check against
  transport::ChildProcess launcher(
      HOTSWAP_LAUNCH_BINARY,
      {"--replicas", "2", "--", "--device=cuda:63", "--model", "/nonexistent"});
  const auto status = launcher.wait_exit(30s);
  while (launcher.read_output(100ms)) {
  }
  BOOST_TEST(status.value_or(-2) == 2, launcher.output());
  BOOST_TEST(
      launcher.output().find("hotswap-launch: --device cuda:63 needs cuda:63") != std::string::npos,
      launcher.output());
  BOOST_TEST(launcher.output().find("[replica") == std::string::npos, launcher.output());
}

BOOST_AUTO_TEST_SUITE_END()
