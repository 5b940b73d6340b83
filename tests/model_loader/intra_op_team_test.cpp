#include "model_loader/intra_op_team.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/ops/ones.h>

#include <filesystem>
#include <functional>
#include <future>
#include <thread>
#include <vector>

using namespace hotswap;

namespace {

// Threads of this process now.
std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task"))
    ++n;
  return n;
}

// A parallel region on the calling thread, inside libtorch (built with OpenMP; a region in this
// file, built without it, would run serially): an add over 2^20 elements.
void run_parallel_region() {
  at::Tensor sum = at::ones({1 << 20}) + 1;
}

// Runs `stages` one after another on a thread of its own; between two, the thread waits for
// `measure`, run here, to note the process's thread count.
std::vector<std::size_t> counts_between(const std::vector<std::function<void()>>& stages) {
  std::vector<std::size_t> counts;
  std::vector<std::promise<void>> done(stages.size()), go(stages.size());
  std::thread other([&] {
    for (std::size_t i = 0; i < stages.size(); ++i) {
      stages[i]();
      done[i].set_value();
      go[i].get_future().wait();
    }
  });
  for (std::size_t i = 0; i < stages.size(); ++i) {
    done[i].get_future().wait();
    counts.push_back(thread_count());
    go[i].set_value();
  }
  other.join();
  return counts;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(intra_op_team)

// A thread that ran a parallel region keeps a helper thread until it lets its team go; a later
// region on it starts one again. What the worker's control and pool threads rely on to leave
// the scheduler's thread the only team.
BOOST_AUTO_TEST_CASE(a_thread_that_lets_its_team_go_leaves_no_helper_behind) {
  const int threads = at::get_num_threads();
  at::set_num_threads(2);
  const auto counts =
      counts_between({[] {}, run_parallel_region, model_loader::release_intra_op_team,
                      run_parallel_region, [] { const model_loader::IntraOpTeamRelease scoped; }});
  at::set_num_threads(threads);
  if (counts[1] == counts[0]) {
    BOOST_TEST_MESSAGE("skipped: libtorch started no OpenMP helper thread here");
    return;
  }
  BOOST_TEST(counts[1] == counts[0] + 1, "no region, then one: " << counts[0] << ", " << counts[1]);
  BOOST_TEST(counts[2] == counts[0], "after letting the team go: " << counts[2]);
  BOOST_TEST(counts[3] == counts[1], "after a second region: " << counts[3]);
  BOOST_TEST(counts[4] == counts[0], "after a scoped release: " << counts[4]);
}

// Without a team, and twice in a row, it does nothing.
BOOST_AUTO_TEST_CASE(letting_go_without_a_team_does_nothing) {
  const auto counts = counts_between(
      {[] {}, model_loader::release_intra_op_team, model_loader::release_intra_op_team});
  BOOST_TEST(counts[1] == counts[0]);
  BOOST_TEST(counts[2] == counts[0]);
}

BOOST_AUTO_TEST_SUITE_END()
