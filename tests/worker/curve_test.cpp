// CURVE on the control socket: authorized clients get answers, others get nothing.
#include <boost/test/unit_test.hpp>

#include <zmq.h>

#include <fstream>

#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;

namespace {

struct KeyPair {
  std::string public_key, secret_key;
  KeyPair() {
    char pub[41], sec[41];
    BOOST_REQUIRE(zmq_curve_keypair(pub, sec) == 0);
    public_key = pub;
    secret_key = sec;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(curve_authentication)

BOOST_AUTO_TEST_CASE(only_authorized_client_keys_are_answered) {
  testing::CheckpointDir ckpt(testing::tiny_config(model_loader::architectures::kLlama), 1400);
  testing::TempDir keys;
  KeyPair server, allowed, stranger;
  std::ofstream(keys.path / "server.key") << server.secret_key;
  std::filesystem::create_directory(keys.path / "authorized");
  std::ofstream(keys.path / "authorized" / "trainer.pub") << allowed.public_key;

  testing::WorkerProcess worker({"--model", ckpt.dir.path.string(), "--curve-secret-key-file",
                                 (keys.path / "server.key").string(), "--curve-authorized-keys",
                                 (keys.path / "authorized").string()});
  trainer_sdk::RpcClient trusted(
      worker.endpoint(), 10s,
      trainer_sdk::CurveKeys{server.public_key, allowed.public_key, allowed.secret_key});
  BOOST_TEST(trusted.call("health")["status"] == "ok");
  trainer_sdk::RpcClient untrusted(
      worker.endpoint(), 1s,
      trainer_sdk::CurveKeys{server.public_key, stranger.public_key, stranger.secret_key});
  BOOST_CHECK_THROW(untrusted.call("health"), protocol::TimeoutError);
  trainer_sdk::RpcClient plain(worker.endpoint(), 1s);
  BOOST_CHECK_THROW(plain.call("health"), protocol::TimeoutError);
  BOOST_TEST(trusted.call("health")["status"] == "ok");
}

BOOST_AUTO_TEST_CASE(curve_without_authorized_keys_needs_an_explicit_yes) {
  testing::CheckpointDir ckpt(testing::tiny_config(model_loader::architectures::kLlama), 1450);
  testing::TempDir keys;
  KeyPair server, anyone;
  std::ofstream(keys.path / "server.key") << server.secret_key;
  // Refused at start: it would accept every client key, silently.
  transport::ChildProcess refused(
      HOTSWAP_WORKER_BINARY, {"--model", ckpt.dir.path.string(), "--control", "tcp://127.0.0.1:*",
                              "--curve-secret-key-file", (keys.path / "server.key").string()});
  auto status = refused.wait_exit(30s);
  while (refused.read_output(0ms)) {
  }
  BOOST_TEST(status.value_or(0) != 0);
  BOOST_TEST(refused.output().find("--curve-allow-any-client") != std::string::npos,
             refused.output());
  // Said explicitly: encrypted, any client key.
  testing::WorkerProcess worker({"--model", ckpt.dir.path.string(), "--curve-secret-key-file",
                                 (keys.path / "server.key").string(), "--curve-allow-any-client"});
  trainer_sdk::RpcClient client(
      worker.endpoint(), 10s,
      trainer_sdk::CurveKeys{server.public_key, anyone.public_key, anyone.secret_key});
  BOOST_TEST(client.call("health")["status"] == "ok");
}

BOOST_AUTO_TEST_CASE(binding_beyond_loopback_without_curve_warns) {
  testing::CheckpointDir ckpt(testing::tiny_config(model_loader::architectures::kLlama), 1500);
  testing::WorkerProcess worker(
      {"--model", ckpt.dir.path.string(), "--control", "tcp://0.0.0.0:*"});
  BOOST_TEST(worker.output().find("without CURVE authentication") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
