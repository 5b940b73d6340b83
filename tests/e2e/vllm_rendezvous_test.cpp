// The rendezvous against torch 2 peers, as vLLM's trainer runs it: the python whose torch the
// build links runs a c10d TCPStore as vLLM's StatelessProcessGroup does
// (tests/e2e/vllm_store_peer.py), and
// hotswap joins it as a worker rank and reads the pickled unique id, or joins its gloo group and
// receives a broadcast; and the other way round, hotswap hosts (as its C++ trainer does) and
// the Python rank unpickles hotswap's pickle, or joins hotswap's gloo group.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <span>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include "protocol/errors.hpp"
#include "protocol/nccl_info.hpp"
#include "receiver/nccl_engine.hpp"
#include "transport/child_process.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/nccl_unique_id.hpp"
#include "transport/rendezvous_store.hpp"

using namespace hotswap;
using namespace std::chrono_literals;

namespace {

// What follows `tag` on the first whole line the Python peer printed that starts with it. It
// searches all the output so far, so asking for "port" never loses an "id" line read with it.
// Importing torch can take many seconds on a loaded machine.
std::string printed(transport::ChildProcess& peer, const std::string& tag) {
  const std::string wanted = tag + " ";
  auto deadline = std::chrono::steady_clock::now() + 60s;
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string& out = peer.output();
    for (std::size_t begin = 0, end; (end = out.find('\n', begin)) != std::string::npos;
         begin = end + 1) {
      if (out.compare(begin, wanted.size(), wanted) == 0) {
        return out.substr(begin + wanted.size(), end - begin - wanted.size());
      }
    }
    if (!peer.read_output(100ms) && peer.poll_exit()) break;
  }
  BOOST_FAIL("the Python peer printed no " + tag + ": " + peer.output());
  return {};
}

// A failed step says what the peer printed (its traceback, if it died) beside its own error.
template <class Step>
auto or_fail_with_peer_output(transport::ChildProcess& peer, Step&& step) {
  try {
    return step();
  } catch (const std::exception& e) {
    while (peer.read_output(200ms)) {
    }
    BOOST_FAIL(std::string(e.what()) + "\nthe Python peer printed: " + peer.output());
    throw;
  }
}

std::string printed_id(transport::ChildProcess& peer) {
  return printed(peer, "id");
}

// The Python host binds a free port itself and prints it (see host_store in the peer): a port
// picked here could be taken by another process before the slow Python start binds it.
int hosted_port(transport::ChildProcess& peer) {
  return std::stoi(printed(peer, "port"));
}

std::string hex(std::span<const std::uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (auto b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string hex(const at::Tensor& bytes) {
  return hex({bytes.data_ptr<std::uint8_t>(), static_cast<std::size_t>(bytes.numel())});
}

// The bytes the Python gloo peer broadcasts as rank 0 (vllm_store_peer.py, gloo_rank).
at::Tensor known_gloo_bytes() {
  at::Tensor data = at::empty({64}, at::TensorOptions().dtype(at::kByte));
  for (int i = 0; i < 64; ++i)
    data[i] = (i * 37 + 11) % 256;
  return data;
}

// The peer's python has a torch whose store protocol is this build's libtorch's (CMake picks it).
transport::ChildProcess python_peer(const std::string& role, std::optional<int> port = std::nullopt,
                                    const std::string& python = HOTSWAP_STORE_PEER_PYTHON) {
  std::vector<std::string> args{std::string(HOTSWAP_E2E_DIR) + "/vllm_store_peer.py", role};
  if (port) args.push_back(std::to_string(*port));
  return transport::ChildProcess(python, args);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(vllm_rendezvous)

BOOST_AUTO_TEST_CASE(a_worker_rank_reads_the_id_from_a_python_hosted_store) {
  auto peer = python_peer("host");
  const int port = hosted_port(peer);
  auto store = or_fail_with_peer_output(peer, [&] {
    return transport::RendezvousStore({"127.0.0.1", port, 1, 2, 30s});
  });
  auto id = transport::unique_id_from_pickle(store.get(transport::stateless_broadcast_key(0, 0)));
  BOOST_TEST(hex(id) == printed_id(peer));
  store.set("hotswap_done", "1");
  BOOST_TEST(peer.wait_exit(30s).value_or(-2) == 0);
}

// vLLM's own rendezvous code as the host, where a python with vLLM is named (as for the HTTP
// client test: HOTSWAP_VLLM_PYTHON); CI has none and says so.
BOOST_AUTO_TEST_CASE(a_worker_rank_joins_the_group_vllms_own_trainer_code_hosts) {
  const char* vllm_python = std::getenv("HOTSWAP_VLLM_PYTHON");
  if (vllm_python == nullptr || *vllm_python == '\0') {
    std::printf(
        "SKIPPED: vLLM's own StatelessProcessGroup as the host needs HOTSWAP_VLLM_PYTHON\n");
    return;
  }
  auto peer = python_peer("vllm-host", std::nullopt, vllm_python);
  const int port = hosted_port(peer);
  transport::RendezvousStore store({"127.0.0.1", port, 1, 2, 60s});
  auto id = transport::unique_id_from_pickle(store.get(transport::stateless_broadcast_key(0, 0)));
  BOOST_TEST(hex(id) == printed_id(peer));
  store.set("hotswap_done", "1");
  BOOST_TEST(peer.wait_exit(30s).value_or(-2) == 0);
}

BOOST_AUTO_TEST_CASE(a_python_rank_unpickles_the_id_from_a_hotswap_hosted_store) {
  const int port = transport::pick_free_port();
  auto peer = python_peer("join", port);
  transport::RendezvousStore store({"127.0.0.1", port, 0, 2, 60s});  // waits for its registration
  transport::NcclUniqueId id{};
  for (std::size_t i = 0; i < id.size(); ++i)
    id[i] = static_cast<std::uint8_t>(i * 29 + 3);
  store.set(transport::stateless_broadcast_key(0, 0), transport::pickle_unique_id(id));
  BOOST_TEST(printed_id(peer) == hex(id));
  store.set("hotswap_done", "1");
  BOOST_TEST(peer.wait_exit(30s).value_or(-2) == 0);
}

// A torch 2 trainer rank hosts the store and the gloo group (as vLLM's gloo trainer does); a
// hotswap rank joins it, does the warm-up all-reduce and receives a broadcast.
BOOST_AUTO_TEST_CASE(a_worker_rank_joins_a_torch2_hosted_gloo_group) {
  auto peer = python_peer("gloo-host");
  const int port = hosted_port(peer);
  auto group = or_fail_with_peer_output(peer, [&] {
    return std::make_unique<transport::GlooCommunicator>(
        transport::GlooRendezvous{"127.0.0.1", port, 1, 2, 60s});
  });
  at::Tensor received = at::zeros({64}, at::TensorOptions().dtype(at::kByte));
  group->broadcast(received, 0, 60s);
  BOOST_TEST(hex(received) == hex(known_gloo_bytes()));
  BOOST_TEST(printed_id(peer) == hex(known_gloo_bytes()));
  group->store()->set("hotswap_done", "1");
  BOOST_TEST(peer.wait_exit(30s).value_or(-2) == 0);
}

// The other way round: hotswap hosts (as its C++ trainer does) and a torch 2 rank joins.
BOOST_AUTO_TEST_CASE(a_torch2_rank_joins_a_hotswap_hosted_gloo_group) {
  const int port = transport::pick_free_port();
  auto peer = python_peer("gloo-join", port);
  auto group = or_fail_with_peer_output(peer, [&] {
    return std::make_unique<transport::GlooCommunicator>(
        transport::GlooRendezvous{"127.0.0.1", port, 0, 2, 60s});
  });
  at::Tensor sent = known_gloo_bytes();
  group->broadcast(sent, 0, 60s);
  BOOST_TEST(printed_id(peer) == hex(known_gloo_bytes()));
  group->store()->set("hotswap_done", "1");
  BOOST_TEST(peer.wait_exit(30s).value_or(-2) == 0);
}

BOOST_AUTO_TEST_CASE(a_missing_key_times_out_naming_it) {
  const int port = transport::pick_free_port();
  auto peer = python_peer("join", port);  // registers, then waits for an id nobody sets
  // The host waits for the registration (torch 2 fails its constructor at the timeout, and the
  // Python start is slow); only the read has the short wait.
  transport::RendezvousStore store({"127.0.0.1", port, 0, 2, 60s});
  BOOST_CHECK_EXCEPTION(
      store.get("broadcast_from/0/1", 1s), protocol::TimeoutError, [](const auto& e) {
        return std::string(e.what()).find("'broadcast_from/0/1' did not appear") !=
               std::string::npos;
      });
}

BOOST_AUTO_TEST_CASE(the_nccl_engine_joins_a_python_hosted_store_then_opens_nccl_on_its_gpu) {
  auto peer = python_peer("host");
  const int port = hosted_port(peer);
  auto factory = receiver::nccl_communicator_factory(c10::Device(c10::kCUDA, 0));
  auto info = protocol::NcclInitInfo::from_json({{"master_address", "127.0.0.1"},
                                                 {"master_port", port},
                                                 {"rank_offset", 1},
                                                 {"world_size", 2}});
  // The rendezvous is the same everywhere (the store is up: its port was printed, so 5 s is
  // plenty); what follows needs a GPU (and on a GPU machine, a peer that joins NCCL too, which
  // this Python host never does: a timeout).
  try {
    factory(info, 1, 5s);
    BOOST_FAIL("an NCCL communicator opened without a peer");
  } catch (const protocol::Error& e) {
    const std::string what = e.what();
#ifdef HOTSWAP_WITH_CUDA
    BOOST_TEST_MESSAGE("without a GPU peer: " << what);
    BOOST_TEST((what.find("cudaSetDevice") != std::string::npos ||
                what.find("NCCL init as rank 1 of 2") != std::string::npos),
               what);
#else
    BOOST_TEST(what.find("need a GPU build of hotswap") != std::string::npos, what);
#endif
  }
  BOOST_TEST(printed_id(peer).size() == 256u);  // the host did publish its id
}

BOOST_AUTO_TEST_SUITE_END()
