#include "worker/log_line.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include <sstream>
#include <string>
#include <thread>
#include <vector>

using hotswap::worker::LogLine;

BOOST_AUTO_TEST_SUITE(log_line)

// Regression: the worker's debug lines were written piece by piece with std::cerr, and a line
// logged by the update thread came out split by the control thread's health lines.
BOOST_AUTO_TEST_CASE(lines_from_many_threads_never_interleave) {
  int fds[2];
  BOOST_REQUIRE(::pipe(fds) == 0);
  const int saved = ::dup(STDERR_FILENO);
  BOOST_REQUIRE(saved >= 0);
  ::dup2(fds[1], STDERR_FILENO);
  ::close(fds[1]);

  std::string captured;
  std::thread reader([&] {
    char buffer[4096];
    for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) > 0;)
      captured.append(buffer, n);
  });
  constexpr int kThreads = 8, kLines = 300;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([t] {
      for (int i = 0; i < kLines; ++i) {
        LogLine{} << "hotswap-worker: "
                  << "thread " << t << " line " << i << " " << 1.5 << " ms";
      }
    });
  }
  for (auto& w : writers)
    w.join();
  ::dup2(saved, STDERR_FILENO);  // closes the pipe's last write end: the reader sees EOF
  ::close(saved);
  reader.join();
  ::close(fds[0]);

  std::istringstream lines(captured);
  int count = 0;
  for (std::string line; std::getline(lines, line); ++count) {
    BOOST_TEST_REQUIRE(line.rfind("hotswap-worker: thread ", 0) == 0, line);
    BOOST_TEST_REQUIRE(line.find("hotswap-worker", 1) == std::string::npos, line);
    BOOST_TEST_REQUIRE(line.size() >= 3, line);
    BOOST_TEST_REQUIRE(line.compare(line.size() - 3, 3, " ms") == 0, line);
  }
  BOOST_TEST(count == kThreads * kLines);
}

BOOST_AUTO_TEST_SUITE_END()
