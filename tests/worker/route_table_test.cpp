#include "worker/routes/route_table.hpp"

#include <boost/test/unit_test.hpp>

#include <stdexcept>
#include <string>

#include "protocol/control_methods.hpp"
#include "protocol/errors.hpp"
#include "protocol/method_params.hpp"
#include "test_support.hpp"

using hotswap::worker::RouteAnswer;
using hotswap::worker::RouteCall;
using hotswap::worker::RouteTable;
using nlohmann::json;
namespace protocol = hotswap::protocol;

BOOST_AUTO_TEST_SUITE(route_table)

// A typed route's params are parsed once, by its own parser, and the parsed form reaches the
// handler: no second from_json in the handler.
BOOST_AUTO_TEST_CASE(a_typed_route_parses_its_params_once) {
  RouteTable table;
  int parsed = 0;
  table.add<protocol::DetokenizeParams>(
      "detokenize",
      [&parsed](const RouteCall& call) {
        ++parsed;
        return protocol::DetokenizeParams::from_json(call.params);
      },
      [](protocol::DetokenizeParams p, const RouteCall&) {
        return RouteAnswer::now(json{{"count", p.tokens.size()}});
      });
  const json params = {{"tokens", {1, 2, 3}}};
  RouteCall call(params);
  auto work = table.prepare("detokenize", call);
  BOOST_TEST(parsed == 1);
  auto answer = work();
  BOOST_TEST(parsed == 1);
  BOOST_TEST(std::get<json>(answer.body)["count"] == 3);
}

// Bad params are refused when the work is prepared, before it runs: a weight-transfer call
// with bad params is then answered without entering the weight session (or its metrics).
BOOST_AUTO_TEST_CASE(bad_params_are_refused_before_any_work) {
  RouteTable table;
  bool ran = false;
  table.add("update_weight_version", [&ran](const RouteCall&) {
    ran = true;
    return RouteAnswer::now(json::object());
  });
  table.add<protocol::DetokenizeParams>(
      "detokenize",
      [](const RouteCall& call) { return protocol::DetokenizeParams::from_json(call.params); },
      [&ran](protocol::DetokenizeParams, const RouteCall&) {
        ran = true;
        return RouteAnswer::now(json::object());
      });
  const json empty = json::object();
  RouteCall call(empty);
  // The untyped route's params pass the table's validator first.
  HOTSWAP_CHECK_THROW_MSG(table.prepare("update_weight_version", call), protocol::ValueError,
                          "new_version");
  HOTSWAP_CHECK_THROW_MSG(table.prepare("detokenize", call), protocol::ValueError, "tokens");
  const json not_object = json::array();
  HOTSWAP_CHECK_THROW_MSG(table.prepare("detokenize", RouteCall(not_object)), protocol::ValueError,
                          "must be a JSON object");
  BOOST_TEST(!ran);
}

BOOST_AUTO_TEST_CASE(an_unknown_method_is_method_not_found) {
  RouteTable table;
  const json empty = json::object();
  HOTSWAP_CHECK_THROW_MSG(table.prepare("nope", RouteCall(empty)), protocol::MethodNotFound,
                          "Method not found: 'nope'");
  // A method of the table whose route is missing reads the same to a client.
  HOTSWAP_CHECK_THROW_MSG(table.prepare("health", RouteCall(empty)), protocol::MethodNotFound,
                          "Method not found: 'health'");
}

// The table and the routes name the same methods: a route for no method, a route added twice
// and a method with no route are defects found at start-up.
BOOST_AUTO_TEST_CASE(routes_and_methods_match_one_to_one) {
  RouteTable table;
  auto answer = [](const RouteCall&) { return RouteAnswer::now(json::object()); };
  HOTSWAP_CHECK_THROW_MSG(table.add("not_a_method", answer), std::logic_error,
                          "route 'not_a_method' is not a method");
  table.add("health", answer);
  HOTSWAP_CHECK_THROW_MSG(table.add("health", answer), std::logic_error, "added twice");
  HOTSWAP_CHECK_THROW_MSG(table.check_complete(), std::logic_error, "has no route");
  for (const auto& method : protocol::control_methods()) {
    if (method.name != "health") table.add(method.name, answer);
  }
  BOOST_CHECK_NO_THROW(table.check_complete());
}

BOOST_AUTO_TEST_SUITE_END()
