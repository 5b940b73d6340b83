#include "worker/serving/serving_metrics.hpp"

#include <boost/test/unit_test.hpp>

#include <limits>

using hotswap::worker::Histogram;
using hotswap::worker::prometheus_number;

BOOST_AUTO_TEST_SUITE(serving_metrics)

// Python's repr, as vLLM's prometheus_client writes every float: shortest round trip, ".0" on
// whole numbers, scientific outside [1e-4, 1e16).
BOOST_AUTO_TEST_CASE(numbers_are_written_as_pythons_repr) {
  BOOST_TEST(prometheus_number(0.1) == "0.1");
  BOOST_TEST(prometheus_number(0.025) == "0.025");
  BOOST_TEST(prometheus_number(0.1 + 0.2) == "0.30000000000000004");
  BOOST_TEST(prometheus_number(600) == "600.0");
  BOOST_TEST(prometheus_number(0) == "0.0");
  BOOST_TEST(prometheus_number(0.0001) == "0.0001");
  BOOST_TEST(prometheus_number(1e-05) == "1e-05");
  BOOST_TEST(prometheus_number(1e16) == "1e+16");
  BOOST_TEST(prometheus_number(std::numeric_limits<double>::infinity()) == "+Inf");
}

// A bucket bound with no exact double (0.1, 0.025) is labelled as vLLM labels it, not with
// the 17 digits of the double beneath it.
BOOST_AUTO_TEST_CASE(bucket_bounds_are_labelled_as_vllm_labels_them) {
  Histogram h({0.025, 0.1, 1.0});
  h.observe(0.05);
  std::string out;
  h.render(out, "x", "m=\"a\"");
  BOOST_TEST(out.find("x_bucket{m=\"a\",le=\"0.025\"} 0\n") != std::string::npos, out);
  BOOST_TEST(out.find("x_bucket{m=\"a\",le=\"0.1\"} 1\n") != std::string::npos, out);
  BOOST_TEST(out.find("x_bucket{m=\"a\",le=\"1.0\"} 1\n") != std::string::npos, out);
  BOOST_TEST(out.find("x_sum{m=\"a\"} 0.05\n") != std::string::npos, out);
}

BOOST_AUTO_TEST_SUITE_END()
