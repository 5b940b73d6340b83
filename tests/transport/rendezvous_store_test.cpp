// What a rendezvous does to the process around it, and what a gone peer does to a gloo call.
// A found defect: a trainer whose worker was killed mid-round died of SIGPIPE now and then,
// with no word of why (the fault-injection suites caught it; they report the signal now).
#include "transport/rendezvous_store.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>

#include <csignal>
#include <thread>

#include "protocol/errors.hpp"
#include "transport/gloo_communicator.hpp"

using namespace hotswap;
using namespace std::chrono_literals;

namespace {

void (*sigpipe_disposition())(int) {
  struct sigaction current {};
  ::sigaction(SIGPIPE, nullptr, &current);
  return current.sa_handler;
}

void on_sigpipe(int) {}

}  // namespace

BOOST_AUTO_TEST_SUITE(rendezvous_store)

BOOST_AUTO_TEST_CASE(a_rendezvous_ignores_sigpipe_unless_the_process_handles_it) {
  std::signal(SIGPIPE, SIG_DFL);  // what a C++ trainer has unless it says otherwise
  { transport::RendezvousStore alone({"127.0.0.1", transport::pick_free_port(), 0, 1, 10s}); }
  BOOST_TEST((sigpipe_disposition() == SIG_IGN));
  std::signal(SIGPIPE, on_sigpipe);
  { transport::RendezvousStore alone({"127.0.0.1", transport::pick_free_port(), 0, 1, 10s}); }
  BOOST_TEST((sigpipe_disposition() == &on_sigpipe));  // the process's own handler stays
  std::signal(SIGPIPE, SIG_DFL);
}

BOOST_AUTO_TEST_CASE(a_gloo_peer_gone_mid_transfer_fails_the_call) {
  std::signal(SIGPIPE, SIG_DFL);
  const int port = transport::pick_free_port();
  std::unique_ptr<transport::GlooCommunicator> peer;
  std::thread join([&] {
    peer = std::make_unique<transport::GlooCommunicator>(
        transport::GlooRendezvous{"127.0.0.1", port, 1, 2, 20s});
  });
  transport::GlooCommunicator root(transport::GlooRendezvous{"127.0.0.1", port, 0, 2, 20s});
  join.join();
  BOOST_REQUIRE(peer);
  at::Tensor sent = at::ones({16});
  std::thread receive([&] {
    at::Tensor into = at::zeros({16});
    peer->broadcast(into, 0, 10s);
  });
  root.broadcast(sent, 0, 10s);
  receive.join();

  peer.reset();  // its sockets close under the root's next writes
  at::Tensor large = at::ones({64 << 20}, at::TensorOptions().dtype(at::kByte));
  for (int i = 0; i < 3; ++i)  // alive after each: the call failed, nothing was killed
    BOOST_CHECK_THROW(root.broadcast(large, 0, 5s), protocol::Error);
}

// A found defect: c10d's set returns before the store has taken the value, so a rank that
// posted why it failed and then broke the group could be read before its note landed.
BOOST_AUTO_TEST_CASE(a_value_set_by_one_rank_is_there_for_another_once_set_returns) {
  const int port = transport::pick_free_port();
  std::unique_ptr<transport::RendezvousStore> writer;
  std::thread join([&] {
    writer = std::make_unique<transport::RendezvousStore>(
        transport::Rendezvous{"127.0.0.1", port, 1, 2, 20s});
  });
  transport::RendezvousStore reader({"127.0.0.1", port, 0, 2, 20s});
  join.join();
  BOOST_REQUIRE(writer);
  for (int i = 0; i < 300; ++i) {
    const std::string key = "note/" + std::to_string(i);
    writer->set(key, "failed: " + std::to_string(i));
    BOOST_REQUIRE_MESSAGE(reader.try_get(key) == "failed: " + std::to_string(i),
                          "set " << i << " was not visible when set returned");
  }
}

BOOST_AUTO_TEST_SUITE_END()
