// Small helpers shared by the test suites.
#pragma once

#include <boost/test/unit_test.hpp>

#include <stdlib.h>

#include <filesystem>
#include <string>

// Checks that `statement` throws `Exception` whose what() contains `needle`.
#define HOTSWAP_CHECK_THROW_MSG(statement, Exception, needle)                             \
  BOOST_CHECK_EXCEPTION(statement, Exception, [&](const Exception& e) {                   \
    std::string what = e.what();                                                          \
    bool found = what.find(needle) != std::string::npos;                                  \
    if (!found) BOOST_TEST_MESSAGE("message was: " << what << " | wanted: " << (needle)); \
    return found;                                                                         \
  })

namespace hotswap::testing {

// A temporary directory, removed with everything in it on every exit path.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "hotswap-test-XXXXXX").string();
    path = mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

}  // namespace hotswap::testing
