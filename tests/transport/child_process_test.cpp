#include "transport/child_process.hpp"

#include <boost/test/unit_test.hpp>

#include <chrono>
#include <csignal>

using hotswap::transport::ChildProcess;
using namespace std::chrono_literals;

BOOST_AUTO_TEST_SUITE(child_process)

BOOST_AUTO_TEST_CASE(captured_output_comes_back_in_lines_with_the_exit_status) {
  ChildProcess child("/bin/sh", {"-c", "echo one; echo two >&2; exit 3"});
  auto status = child.wait_exit(10s);
  BOOST_REQUIRE(status.has_value());
  BOOST_TEST(*status == 3);
  while (child.read_output(100ms)) {
  }
  auto lines = child.take_lines();
  BOOST_TEST(lines.size() == 2u);
}

// hotswap-trainer's other ranks print where it prints: nothing to read, and waiting for one
// still ends when it does.
BOOST_AUTO_TEST_CASE(inherited_output_is_not_read_and_wait_exit_still_ends) {
  ChildProcess child("/bin/sh", {"-c", "exit 0"}, ChildProcess::Output::kInherited);
  BOOST_TEST(child.output_fd() < 0);
  auto status = child.wait_exit(10s);
  BOOST_REQUIRE(status.has_value());
  BOOST_TEST(*status == 0);
  BOOST_TEST(!child.read_output(10ms));
}

BOOST_AUTO_TEST_CASE(stop_ends_a_child_that_would_run_on) {
  ChildProcess child("/bin/sleep", {"60"}, ChildProcess::Output::kInherited);
  BOOST_TEST(!child.wait_exit(50ms).has_value());
  BOOST_TEST(child.stop(5s) == -1);  // ended by SIGTERM
  BOOST_TEST(child.term_signal() == SIGTERM);
}

BOOST_AUTO_TEST_SUITE_END()
