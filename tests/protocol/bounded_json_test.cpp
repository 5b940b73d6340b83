#include "protocol/bounded_json.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/jsonrpc.hpp"
#include "test_support.hpp"

using namespace hotswap::protocol;
using nlohmann::json;

BOOST_AUTO_TEST_SUITE(bounded_json)

BOOST_AUTO_TEST_CASE(the_scan_finds_depth_and_end_without_building_anything) {
  BOOST_TEST(scan_json(R"({"a":[1,{"b":"]]}"}]} tail)").depth == 3u);
  BOOST_TEST(scan_json(R"({"a":[1,{"b":"]]}"}]} tail)").end == 21u);
  BOOST_TEST(scan_json(R"("a\"b" x)").end == 6u);
  BOOST_TEST(scan_json("123 ").end == 3u);
  auto deep = scan_json(std::string(1000000, '['), 128);
  BOOST_TEST(deep.too_deep);
  BOOST_TEST(deep.depth == 129u);
}

BOOST_AUTO_TEST_CASE(refusals_say_why_before_the_parser_runs) {
  BOOST_TEST(parse_bounded_json("[1]").ok());
  auto big = parse_bounded_json(std::string(300, ' ') + "1", JsonBounds{.max_bytes = 200});
  BOOST_TEST((big.refusal == JsonRefusal::kTooLarge));
  BOOST_TEST(big.reason == "is 301 bytes, over the limit of 200");
  auto deep = parse_bounded_json(std::string(200, '[') + std::string(200, ']'));
  BOOST_TEST((deep.refusal == JsonRefusal::kTooDeep));
  BOOST_TEST(deep.reason == "nests arrays and objects deeper than 128 levels");
  BOOST_TEST(parse_bounded_json(std::string(128, '[') + std::string(128, ']')).ok());
  BOOST_TEST((parse_bounded_json("{").refusal == JsonRefusal::kInvalid));
  // The parser keeps the last of repeated keys; a format that forbids them refuses.
  BOOST_TEST(parse_bounded_json(R"({"a":1,"a":2})").value["a"] == 2);
  auto duplicate = parse_bounded_json(R"({"x":{"a":1,"b":{"a":0},"a":2}})",
                                      JsonBounds{.refuse_duplicate_keys = true});
  BOOST_TEST((duplicate.refusal == JsonRefusal::kDuplicateKey));
  BOOST_TEST(duplicate.reason == "repeats the key 'a'");
  BOOST_TEST(
      parse_bounded_json(R"([{"a":1},{"a":2}])", JsonBounds{.refuse_duplicate_keys = true}).ok());
}

BOOST_AUTO_TEST_CASE(a_byte_order_mark_or_a_nul_cannot_hide_depth_or_trailing_bytes) {
  // Found by fuzzing: the parser skipped a leading BOM that the depth scan did not.
  const std::string bom = "\xEF\xBB\xBF";
  auto deep = parse_bounded_json(bom + std::string(1000, '[') + std::string(1000, ']'));
  BOOST_TEST((deep.refusal == JsonRefusal::kInvalid));
  BOOST_TEST(deep.reason.find("byte-order mark") != std::string::npos);
  auto nul = parse_bounded_json(std::string("{}\0 trailing", 12));
  BOOST_TEST((nul.refusal == JsonRefusal::kInvalid));
}

BOOST_AUTO_TEST_CASE(every_error_can_be_sent_back_whatever_bytes_it_quotes) {
  // Found by fuzzing: a description cut inside a UTF-8 character, and a message quoting bytes
  // that are not UTF-8, made the reply impossible to serialize.
  try {
    parse_request(R"({"jsonrpc":"2.0","id":1,"method":"pause","params":")" + std::string(38, 'a') +
                  "\xC3\xA9\xC3\xA9\"}");
    BOOST_FAIL("expected a refusal");
  } catch (const RpcRequestError& e) {
    BOOST_TEST(!json::parse(reply_frame(make_error(e.id(), e), e.id_text())).is_discarded());
  }
  const std::string reply = reply_frame(make_error(1, ValueError("bad byte \xff here")), "1");
  BOOST_TEST(!json::parse(reply).is_discarded());
}

BOOST_AUTO_TEST_CASE(a_top_level_member_is_found_as_written) {
  const std::string text = R"( {"jsonrpc":"2.0", "id" : 18446744073709551617 ,"x":{"id":1}} )";
  BOOST_TEST(*top_level_member_text(text, "id") == "18446744073709551617");
  BOOST_TEST(*top_level_member_text(R"({"\u0069d":1.50})", "id") == "1.50");
  BOOST_TEST(*top_level_member_text(R"({"id":1,"id":[2, 3]})", "id") == "[2, 3]");
  BOOST_TEST(!top_level_member_text(R"({"x":{"id":1}})", "id"));
  BOOST_TEST(!top_level_member_text("[1]", "id"));
}

BOOST_AUTO_TEST_CASE(replies_carry_the_id_as_the_request_spelled_it) {
  for (const std::string id : {"18446744073709551617", "1.50", "-0", "7", R"("s")", "null"}) {
    auto request = parse_request(R"({"jsonrpc":"2.0","id":)" + id + R"(,"method":"health"})");
    BOOST_TEST(request.id_text == id);
    std::string reply = reply_frame(make_result(request.id, {{"ok", true}}), request.id_text);
    BOOST_TEST(reply == R"({"id":)" + id + R"(,"jsonrpc":"2.0","result":{"ok":true}})");
    BOOST_TEST(!json::parse(reply).is_discarded());
  }
}

BOOST_AUTO_TEST_CASE(oversized_and_overdeep_requests_get_the_pinned_codes) {
  try {
    parse_request(R"({"jsonrpc":"2.0","id":1,"method":"health"})", 10);
    BOOST_FAIL("expected a refusal");
  } catch (const RpcRequestError& e) {
    BOOST_TEST(error_code(e.kind()) == kInvalidRequestCode);
    BOOST_TEST(std::string(e.what()).find("--max-request-bytes") != std::string::npos);
  }
  try {
    parse_request(std::string(100000, '[') + std::string(100000, ']'));
    BOOST_FAIL("expected a refusal");
  } catch (const RpcRequestError& e) {
    BOOST_TEST(error_code(e.kind()) == kParseErrorCode);
  }
}

BOOST_AUTO_TEST_SUITE_END()
