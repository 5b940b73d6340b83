// ReceivePipeline over a real gloo group of two ranks on loopback: broadcasts posted two deep
// arrive whole and in order, whichever rank is the root, and a peer that goes fails the wait
// promptly instead of leaving it to hang.
#include "transport/receive_pipeline.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/zeros.h>
#include <ATen/ops/zeros_like.h>

#include <memory>
#include <thread>
#include <vector>

#include "protocol/errors.hpp"
#include "transport/gloo_communicator.hpp"

using namespace hotswap;
using namespace std::chrono_literals;

namespace {

struct Pair {
  std::unique_ptr<transport::GlooCommunicator> zero, one;
  Pair() {
    const int port = transport::pick_free_port();
    std::thread join([&] {
      one = std::make_unique<transport::GlooCommunicator>(
          transport::GlooRendezvous{"127.0.0.1", port, 1, 2, 20s});
    });
    zero = std::make_unique<transport::GlooCommunicator>(
        transport::GlooRendezvous{"127.0.0.1", port, 0, 2, 20s});
    join.join();
  }
};

// Tensor i: sizes from 1 element to a few MiB (so that several are on the wire at once),
// rooted at rank i % 3 == 2 ? 1 : 0.
at::Tensor expected(int i) {
  const std::int64_t n = i % 2 == 0 ? (i + 1) * 300000 : i + 1;
  return at::arange(n, at::TensorOptions().dtype(at::kFloat)).add_(i);
}
int root_of(int i) {
  return i % 3 == 2 ? 1 : 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(receive_pipeline)

BOOST_AUTO_TEST_CASE(pipelined_broadcasts_arrive_whole_and_in_order_from_either_root) {
  Pair pair;
  constexpr int kCount = 9;
  std::vector<at::Tensor> received(kCount);
  std::vector<int> completed;
  std::thread sender([&] {
    // Rank 0 sends one at a time, as a trainer does; it receives where rank 1 is the root.
    for (int i = 0; i < kCount; ++i) {
      at::Tensor t = root_of(i) == 0 ? expected(i) : at::zeros_like(expected(i));
      pair.zero->broadcast(t, root_of(i), 20s);
      if (root_of(i) == 1) BOOST_CHECK(at::equal(t, expected(i)));
    }
  });
  transport::ReceivePipeline pipeline(*pair.one, 20s);
  for (int i = 0; i < kCount; ++i) {
    received[i] = root_of(i) == 1 ? expected(i) : at::zeros_like(expected(i));
    pipeline.receive(received[i], root_of(i), [&completed, i] { completed.push_back(i); });
    // Never more than the pipeline's depth outstanding.
    BOOST_CHECK_GE(completed.size() + transport::ReceivePipeline::kDepth, i + 1u);
  }
  pipeline.finish();
  sender.join();
  BOOST_REQUIRE_EQUAL(completed.size(), static_cast<std::size_t>(kCount));
  for (int i = 0; i < kCount; ++i) {
    BOOST_CHECK_EQUAL(completed[i], i);
    BOOST_CHECK_MESSAGE(at::equal(received[i], expected(i)), "tensor " << i << " arrived wrong");
  }
}

BOOST_AUTO_TEST_CASE(a_peer_gone_with_receives_posted_fails_the_wait_promptly) {
  Pair pair;
  std::vector<at::Tensor> into{at::zeros({1 << 20}), at::zeros({1 << 20})};
  transport::ReceivePipeline pipeline(*pair.one, 20s);
  int ran = 0;
  for (auto& t : into)
    pipeline.receive(t, 0, [&ran] { ++ran; });
  const auto started = std::chrono::steady_clock::now();
  pair.zero.reset();  // the sender goes with both of the receiver's broadcasts posted
  BOOST_CHECK_THROW(pipeline.finish(), protocol::Error);
  BOOST_CHECK_EQUAL(ran, 0);
  // Its sockets closed: the wait ends on that, not on the 20 s timeout.
  BOOST_CHECK_LT(std::chrono::steady_clock::now() - started, 10s);
  pair.one->abort();  // the teardown an engine does after a failed collective
}

BOOST_AUTO_TEST_SUITE_END()
