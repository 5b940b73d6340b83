// The Boost.Test entry point shared by every hotswap test executable.
#define BOOST_TEST_MODULE hotswap
#include <boost/test/unit_test.hpp>
