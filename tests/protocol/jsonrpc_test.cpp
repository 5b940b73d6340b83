#include "protocol/jsonrpc.hpp"

#include <boost/test/unit_test.hpp>

#include "test_support.hpp"

using namespace hotswap::protocol;
using nlohmann::json;

namespace {
// The code a malformed frame is rejected with.
int rejection_code(std::string_view frame) {
  try {
    parse_request(frame);
  } catch (const RpcRequestError& e) {
    return error_code(e.kind());
  }
  return 0;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(jsonrpc)

BOOST_AUTO_TEST_CASE(request_parses_with_its_id_method_and_params) {
  auto r = parse_request(R"({"jsonrpc":"2.0","id":7,"method":"update_weights",
                             "params":{"update_info":{"names":[]}}})");
  BOOST_TEST(r.id == 7);
  BOOST_TEST(r.method == "update_weights");
  BOOST_TEST(r.params["update_info"]["names"].is_array());
  auto no_params = parse_request(R"({"jsonrpc":"2.0","id":"a","method":"health"})");
  BOOST_TEST(no_params.params == json::object());
  BOOST_TEST(no_params.id == "a");
  auto no_id = parse_request(R"({"jsonrpc":"2.0","method":"health"})");
  BOOST_TEST(no_id.id.is_null());
}

BOOST_AUTO_TEST_CASE(malformed_frames_get_the_pinned_codes) {
  BOOST_TEST(rejection_code("{not json") == -32700);
  BOOST_TEST(rejection_code("[1,2]") == -32600);
  BOOST_TEST(rejection_code(R"({"id":1,"method":"health"})") == -32600);
  BOOST_TEST(rejection_code(R"({"jsonrpc":"1.0","id":1,"method":"health"})") == -32600);
  BOOST_TEST(rejection_code(R"({"jsonrpc":"2.0","id":1,"method":5})") == -32600);
  BOOST_TEST(rejection_code(R"({"jsonrpc":"2.0","id":1,"method":"pause","params":[1]})") == -32600);
  BOOST_TEST(rejection_code(R"({"jsonrpc":"2.0","id":{},"method":"health"})") == -32600);
  BOOST_TEST(rejection_code(R"({"jsonrpc":"2.0","id":1,"method":"health","x":1})") == -32600);
}

BOOST_AUTO_TEST_CASE(invalid_request_error_keeps_the_id_it_could_read) {
  try {
    parse_request(R"({"jsonrpc":"2.0","id":42,"method":"pause","params":"abort"})");
    BOOST_FAIL("expected an error");
  } catch (const RpcRequestError& e) {
    BOOST_TEST(e.id() == 42);
    BOOST_TEST(std::string(e.what()).find("`params` must be an object") != std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(error_replies_carry_code_message_and_type) {
  json reply = make_error(3, ValueError("Missing 'init_info' in request body"));
  BOOST_TEST(reply["jsonrpc"] == "2.0");
  BOOST_TEST(reply["id"] == 3);
  BOOST_TEST(reply["error"]["code"] == -32602);
  BOOST_TEST(reply["error"]["message"] == "Missing 'init_info' in request body");
  BOOST_TEST(reply["error"]["data"]["type"] == "ValueError");
  json foreign = make_error(nullptr, std::runtime_error("c10 said no"));
  BOOST_TEST(foreign["error"]["code"] == -32000);
  BOOST_TEST(foreign["error"]["data"]["type"] == "RuntimeError");
}

BOOST_AUTO_TEST_CASE(client_side_parsing_returns_results_and_rethrows_typed_errors) {
  json ok = make_result(1, {{"message", "Weights updated"}});
  BOOST_TEST(parse_response(ok.dump())["message"] == "Weights updated");
  json wrong_state = make_error(1, ErrorKind::kRuntimeError,
                                "start_weight_update must be called before update_weights.");
  HOTSWAP_CHECK_THROW_MSG(parse_response(wrong_state.dump()), RuntimeError,
                          "start_weight_update must be called before update_weights.");
  json timeout = make_error(1, ErrorKind::kTimeoutError, "no trainer within 5 s");
  BOOST_CHECK_THROW(parse_response(timeout.dump()), TimeoutError);
  HOTSWAP_CHECK_THROW_MSG(parse_response("garbage"), TransferError, "malformed JSON-RPC reply");
  HOTSWAP_CHECK_THROW_MSG(parse_response(R"({"jsonrpc":"2.0","id":1})"), TransferError,
                          "neither `result` nor `error`");
  // A reply is outside input too: wrong-typed fields are no JSON library error.
  HOTSWAP_CHECK_THROW_MSG(parse_response(R"({"jsonrpc":2,"id":1,"result":{}})"), TransferError,
                          "malformed JSON-RPC reply");
  HOTSWAP_CHECK_THROW_MSG(
      parse_response(R"({"jsonrpc":"2.0","id":1,"error":{"code":"x","message":7,"data":[]}})"),
      RuntimeError, "");
  json request = make_request(9, "health");
  BOOST_TEST(parse_request(request.dump()).method == "health");
}

// Every JSON-RPC server of the worker answers through these two: a result, a typed error
// with its kind, an untyped one as a RuntimeError, and a frame that is no request with the
// parser's error, each carrying the request's id as written.
BOOST_AUTO_TEST_CASE(answer_request_replies_with_the_result_or_the_error_and_says_which) {
  RpcRequest request = parse_request(R"({"jsonrpc":"2.0","id":1.50,"method":"health"})");
  auto ok = answer_request(request, [] { return json{{"status", "ok"}}; });
  BOOST_TEST(!ok.error.has_value());
  BOOST_TEST(ok.frame.find(R"("id":1.50)") != std::string::npos);
  BOOST_TEST(json::parse(ok.frame)["result"]["status"] == "ok");

  auto typed = answer_request(request, []() -> json { throw ValueError("bad field"); });
  BOOST_TEST(typed.error.value() == "bad field");
  BOOST_TEST(json::parse(typed.frame)["error"]["code"] == -32602);

  auto untyped = answer_request(request, []() -> json { throw std::logic_error("oops"); });
  BOOST_TEST(json::parse(untyped.frame)["error"]["data"]["type"] == "RuntimeError");
}

BOOST_AUTO_TEST_CASE(answer_frame_parses_first_and_answers_a_malformed_frame_with_its_code) {
  bool called = false;
  auto refused = answer_frame("{not json", kDefaultMaxRequestBytes, [&](const RpcRequest&) {
    called = true;
    return json::object();
  });
  BOOST_TEST(!called);
  BOOST_TEST(refused.error.has_value());
  BOOST_TEST(json::parse(refused.frame)["error"]["code"] == -32700);

  auto echoed = answer_frame(R"({"jsonrpc":"2.0","id":"x","method":"forward","params":{"a":1}})",
                             kDefaultMaxRequestBytes, [](const RpcRequest& r) {
                               return json{{"method", r.method}, {"a", r.params["a"]}};
                             });
  auto reply = json::parse(echoed.frame);
  BOOST_TEST(reply["id"] == "x");
  BOOST_TEST(reply["result"]["method"] == "forward");
  BOOST_TEST(reply["result"]["a"] == 1);
}

BOOST_AUTO_TEST_SUITE_END()
