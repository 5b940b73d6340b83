#include "protocol/errors.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/base64.hpp"

using namespace hotswap::protocol;

BOOST_AUTO_TEST_SUITE(error_codes)

BOOST_AUTO_TEST_CASE(each_kind_maps_to_its_pinned_code) {
  BOOST_TEST(error_code(ErrorKind::kParseError) == -32700);
  BOOST_TEST(error_code(ErrorKind::kInvalidRequest) == -32600);
  BOOST_TEST(error_code(ErrorKind::kMethodNotFound) == -32601);
  BOOST_TEST(error_code(ErrorKind::kValueError) == -32602);
  BOOST_TEST(error_code(ErrorKind::kRuntimeError) == -32000);
  BOOST_TEST(error_code(ErrorKind::kTimeoutError) == -32001);
  BOOST_TEST(error_code(ErrorKind::kTransferError) == -32001);
  BOOST_TEST(error_type_name(ErrorKind::kValueError) == "ValueError");
  BOOST_TEST(error_type_name(ErrorKind::kTimeoutError) == "TimeoutError");
}

BOOST_AUTO_TEST_CASE(a_reply_maps_back_to_its_kind_by_type_then_code) {
  BOOST_TEST((error_kind_from_reply(-32001, "TimeoutError") == ErrorKind::kTimeoutError));
  BOOST_TEST((error_kind_from_reply(-32001, "TransferError") == ErrorKind::kTransferError));
  BOOST_TEST((error_kind_from_reply(-32602, "") == ErrorKind::kValueError));
  BOOST_TEST((error_kind_from_reply(12345, "Nonsense") == ErrorKind::kRuntimeError));
}

BOOST_AUTO_TEST_CASE(throw_error_raises_the_typed_exception) {
  BOOST_CHECK_THROW(throw_error(ErrorKind::kValueError, "x"), ValueError);
  BOOST_CHECK_THROW(throw_error(ErrorKind::kTimeoutError, "x"), TimeoutError);
  BOOST_CHECK_THROW(throw_error(ErrorKind::kRuntimeError, "x"), RuntimeError);
  try {
    throw_error(ErrorKind::kTransferError, "peer gone");
  } catch (const Error& e) {
    BOOST_TEST((e.kind() == ErrorKind::kTransferError));
    BOOST_TEST(std::string(e.what()) == "peer gone");
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(base64_strict)

BOOST_AUTO_TEST_CASE(round_trips_every_length) {
  for (std::size_t n = 0; n < 10; ++n) {
    std::vector<std::uint8_t> bytes(n);
    for (std::size_t i = 0; i < n; ++i)
      bytes[i] = static_cast<std::uint8_t>(251 - 17 * i);
    auto decoded = base64_decode(base64_encode(bytes));
    BOOST_REQUIRE(decoded.has_value());
    BOOST_TEST(*decoded == bytes);
  }
  BOOST_TEST(base64_encode(std::vector<std::uint8_t>{'h', 'i'}) == "aGk=");
}

BOOST_AUTO_TEST_CASE(rejects_url_safe_whitespace_and_bad_padding) {
  BOOST_TEST(!base64_decode("a-_b").has_value());  // URL-safe alphabet
  BOOST_TEST(!base64_decode("aGk").has_value());   // length not a multiple of 4
  BOOST_TEST(!base64_decode("aG k").has_value());  // whitespace
  BOOST_TEST(!base64_decode("a=Gk").has_value());  // padding in the middle
  BOOST_TEST(!base64_decode("a===").has_value());  // three padding characters
  BOOST_TEST(base64_decode("").has_value());
}

// One mapping from an error to what HTTP says of it: the kind's status, the kind's name (a
// RuntimeError for an exception of no kind, as JSON-RPC reports it), and the OpenAI routes'
// type, which follows the status.
BOOST_AUTO_TEST_CASE(every_error_maps_to_one_http_status_and_type) {
  BOOST_TEST(http_status(ValueError("x")) == 400);
  BOOST_TEST(http_status(RuntimeError("x")) == 500);
  BOOST_TEST(http_status(OverloadedError("x")) == 503);
  BOOST_TEST(http_status(std::logic_error("x")) == 500);
  BOOST_TEST(error_type_name(ValueError("x")) == "ValueError");
  BOOST_TEST(error_type_name(std::logic_error("x")) == "RuntimeError");
  BOOST_TEST(openai_error_type(400) == "BadRequestError");
  BOOST_TEST(openai_error_type(404) == "NotFoundError");
  BOOST_TEST(openai_error_type(503) == "ServiceUnavailableError");
  BOOST_TEST(openai_error_type(500) == "InternalServerError");
}

// A model or adapter the worker does not serve: the table makes it vLLM's 404 naming `model`
// over HTTP, and a ValueError for everyone else (caught as one, its JSON-RPC code and type,
// re-raised as one by a client).
BOOST_AUTO_TEST_CASE(a_model_not_served_is_a_value_error_answered_404) {
  const ModelNotFoundError missing("The model `x` does not exist.");
  BOOST_TEST(http_status(missing) == 404);
  BOOST_TEST(openai_error_param(missing) == "model");
  BOOST_TEST(openai_error_param(ValueError("x")).empty());
  BOOST_TEST(error_code(missing.kind()) == -32602);
  BOOST_TEST(error_type_name(missing) == "ValueError");
  BOOST_TEST(dynamic_cast<const ValueError*>(&missing) != nullptr);
  BOOST_TEST((error_kind_from_reply(-32602, "ValueError") == ErrorKind::kValueError));
  BOOST_CHECK_THROW(throw_error(ErrorKind::kModelNotFound, "x"), ModelNotFoundError);
}

BOOST_AUTO_TEST_SUITE_END()
