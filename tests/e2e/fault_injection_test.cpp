// Fault injection, end to end: a real hotswap-trainer process stopped at each point of a round
// (--fault-at, a hook in the trainer SDK, never a sleep) and SIGKILLed there, for every CPU
// backend; and a worker SIGKILLed mid-round under a live trainer. What must hold afterwards:
//   - the worker ends whatever call the dead trainer left in flight, with an error, within its
//     --timeout, and keeps answering;
//   - it serves exactly the greedy tokens it served before (nothing half-committed);
//   - nothing of the dead trainer's stays in /dev/shm;
//   - a fresh trainer's init and a verified round succeed;
//   - with the worker killed instead, the trainer exits non-zero within its timeout, saying why
//     in one line.
#include <boost/test/unit_test.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "model_loader/model_test_support.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "transport/child_process.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kTimeoutSeconds = 5;  // the worker's and the trainer's --timeout

struct Setup {
  model_loader::ModelConfig config =
      testing::tiny_config(model_loader::architectures::kLlama, protocol::DType::kFloat32);
  testing::CheckpointDir served{config, 7100};
  testing::CheckpointDir trained{config, 7200};
  testing::TempDir shared;  // the disk backend's directory
};

std::unique_ptr<testing::WorkerProcess> start_worker(const Setup& s, const std::string& backend) {
  return std::make_unique<testing::WorkerProcess>(std::vector<std::string>{
      "--model", s.served.dir.path.string(), "--weight-transfer-config",
      R"({"backend": ")" + backend + R"("})", "--timeout", std::to_string(kTimeoutSeconds)});
}

std::vector<std::string> trainer_args(const Setup& s, const std::string& backend,
                                      const std::string& endpoint) {
  // A sparse trainer sends deltas: it starts from the weights the worker serves.
  const auto& source = backend.starts_with("sparse") ? s.served : s.trained;
  std::vector<std::string> args = {"--workers",     endpoint,
                                   "--backend",     backend,
                                   "--source",      source.dir.path.string(),
                                   "--rounds",      "1",
                                   "--timeout",     std::to_string(kTimeoutSeconds),
                                   "--buffer-size", "16384"};  // several chunks a round
  if (backend == "disk") {
    args.insert(args.end(), {"--disk-dir", s.shared.path.string()});
  }
  return args;
}

json greedy(trainer_sdk::RpcClient& client) {
  return client.call(
      "generate",
      {{"prompt_token_ids", {1, 2, 3, 4}}, {"max_tokens", 8}, {"temperature", 0}})["token_ids"];
}

// The process's state letter from /proc ('T' when stopped), or '?' once it is gone.
char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return '?';
  auto close = line.rfind(')');
  return close == std::string::npos || close + 2 >= line.size() ? '?' : line[close + 2];
}

// Reads the trainer's output until it exits; its status (-1 if a signal ended it).
int wait_trainer(transport::ChildProcess& trainer, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    trainer.read_output(50ms);
    if (auto status = trainer.poll_exit()) {
      while (trainer.read_output(0ms)) {
      }
      return *status;
    }
  }
  BOOST_FAIL("the trainer did not exit within " << timeout.count() << " ms; it printed:\n"
                                                << trainer.output());
  return 0;
}

std::vector<std::string> segments_of(pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "hotswap-" + std::to_string(pid) + "-";
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().starts_with(prefix)) out.push_back(e.path().filename());
  }
  return out;
}

// Waits until the worker has no weight-transfer call running; how long that took.
std::chrono::milliseconds until_idle(trainer_sdk::RpcClient& client,
                                     std::chrono::milliseconds limit) {
  const auto start = Clock::now();
  while (!client.call("health")["weight_call"].is_null() && Clock::now() - start < limit) {
    std::this_thread::sleep_for(20ms);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
}

void kill_trainer_at(const std::string& backend, const std::string& point) {
  Setup s;
  auto worker = start_worker(s, backend);
  trainer_sdk::RpcClient client(worker->endpoint(), 30s);
  const json tokens = greedy(client);
  const json sums = client.call("weight_checker", {{"action", "checksum"}});

  auto args = trainer_args(s, backend, worker->endpoint());
  args.insert(args.end(), {"--fault-at", point});
  transport::ChildProcess killed(HOTSWAP_TRAINER_BINARY, args);
  const pid_t killed_pid = killed.pid();
  BOOST_TEST(wait_trainer(killed, 60s) == -1, "the trainer must die by its SIGKILL");
  BOOST_TEST(killed.output().find("fault injection: kill at " + point) != std::string::npos,
             killed.output());

  // Whatever the dead trainer left in flight ends with an error within --timeout.
  const auto took = until_idle(client, std::chrono::seconds(kTimeoutSeconds + 5));
  BOOST_TEST(took.count() <= (kTimeoutSeconds + 3) * 1000, "idle after " << took.count() << " ms");
  BOOST_TEST(client.call("health")["status"] == "ok");
  BOOST_TEST(greedy(client) == tokens);
  BOOST_TEST(client.call("weight_checker", {{"action", "checksum"}}) == sums);

  // A fresh trainer: init, a verified round.
  args = trainer_args(s, backend, worker->endpoint());
  args.push_back("--verify");
  transport::ChildProcess fresh(HOTSWAP_TRAINER_BINARY, args);
  BOOST_TEST(wait_trainer(fresh, 60s) == 0, fresh.output());
  BOOST_TEST(fresh.output().find("verified") != std::string::npos, fresh.output());
  BOOST_TEST(client.call("health")["weight_version"] == "round-1");

  // Nothing of either trainer is left in /dev/shm (the dead one's went with it or at the
  // fresh handshake; the fresh one removed its own).
  auto deadline = Clock::now() + 5s;
  while (!segments_of(killed_pid).empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  BOOST_TEST(segments_of(killed_pid).empty());
  BOOST_TEST(segments_of(fresh.pid()).empty());
}

void kill_worker_mid_round(const std::string& backend) {
  Setup s;
  auto worker = start_worker(s, backend);
  auto args = trainer_args(s, backend, worker->endpoint());
  args.insert(args.end(), {"--fault-at", "update", "--fault-action", "stop"});
  transport::ChildProcess trainer(HOTSWAP_TRAINER_BINARY, args);
  // The trainer stops itself mid-update; the worker dies; the trainer goes on.
  auto deadline = Clock::now() + 30s;
  while (trainer.output().find("fault injection: stop at update") == std::string::npos &&
         Clock::now() < deadline) {
    trainer.read_output(50ms);
  }
  while (process_state(trainer.pid()) != 'T' && Clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  BOOST_REQUIRE_MESSAGE(process_state(trainer.pid()) == 'T', trainer.output());
  ::kill(worker->pid(), SIGKILL);
  worker->stop(5s);
  const auto resumed = Clock::now();
  ::kill(trainer.pid(), SIGCONT);
  const int status = wait_trainer(trainer, std::chrono::seconds(kTimeoutSeconds * 3 + 10));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - resumed);
  BOOST_TEST(status != 0);
  BOOST_TEST(took.count() <= (kTimeoutSeconds * 2 + 3) * 1000,
             "exited after " << took.count() << " ms");
  // The cause: one line from hotswap-trainer, and no backtrace anywhere.
  const std::string& out = trainer.output();
  auto cause = out.find("hotswap-trainer: ", out.find("fault injection") + 1);
  BOOST_REQUIRE_MESSAGE(cause != std::string::npos, "exit status " << status << ", signal "
                                                                   << trainer.term_signal() << ": "
                                                                   << out);
  const std::string rest = out.substr(cause);
  BOOST_TEST(rest.find('\n') == rest.size() - 1, "more than one line: " << rest);
  BOOST_TEST(out.find("Exception raised from") == std::string::npos, out);
  BOOST_TEST(out.find("frame #") == std::string::npos, out);
  BOOST_TEST(segments_of(trainer.pid()).empty());
}

}  // namespace

// Each suite's fixture names its backend; the cases are the same for all four.
struct Gloo {
  const std::string backend = "gloo";
};
struct SparseGloo {
  const std::string backend = "sparse_gloo";
};
struct Shm {
  const std::string backend = "shm";
};
struct Disk {
  const std::string backend = "disk";
};

#define HOTSWAP_FAULT_CASES                            \
  BOOST_AUTO_TEST_CASE(trainer_killed_during_init) {   \
    kill_trainer_at(backend, "init");                  \
  }                                                    \
  BOOST_AUTO_TEST_CASE(trainer_killed_after_start) {   \
    kill_trainer_at(backend, "start");                 \
  }                                                    \
  BOOST_AUTO_TEST_CASE(trainer_killed_mid_update) {    \
    kill_trainer_at(backend, "update");                \
  }                                                    \
  BOOST_AUTO_TEST_CASE(trainer_killed_before_finish) { \
    kill_trainer_at(backend, "finish");                \
  }                                                    \
  BOOST_AUTO_TEST_CASE(worker_killed_mid_round) {      \
    kill_worker_mid_round(backend);                    \
  }

BOOST_FIXTURE_TEST_SUITE(fault_injection_gloo, Gloo)
HOTSWAP_FAULT_CASES
BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(fault_injection_sparse_gloo, SparseGloo)
HOTSWAP_FAULT_CASES
BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(fault_injection_shm, Shm)
HOTSWAP_FAULT_CASES
BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(fault_injection_disk, Disk)
HOTSWAP_FAULT_CASES
BOOST_AUTO_TEST_SUITE_END()
