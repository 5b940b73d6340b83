// Small helpers shared by the test suites.
#pragma once

#include <boost/test/unit_test.hpp>

#include <string>

// Checks that `statement` throws `Exception` whose what() contains `needle`.
#define HOTSWAP_CHECK_THROW_MSG(statement, Exception, needle)                             \
  BOOST_CHECK_EXCEPTION(statement, Exception, [&](const Exception& e) {                   \
    std::string what = e.what();                                                          \
    bool found = what.find(needle) != std::string::npos;                                  \
    if (!found) BOOST_TEST_MESSAGE("message was: " << what << " | wanted: " << (needle)); \
    return found;                                                                         \
  })
