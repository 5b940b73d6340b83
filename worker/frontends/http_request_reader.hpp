// How the worker reads an HTTP/1.1 request off the wire: Boost.Beast's parser with hard limits,
// the framing it refuses (and what status says so), and the conversion to an HttpRequest. The
// HTTP listener reads with these a piece at a time; read_http_request does the same on bytes in
// memory, for the tests and the fuzz target.
//
// Refused, before any route sees the request:
//   - a header block over max_header_bytes: 431;
//   - a body over max_body_bytes, whatever its framing (Content-Length, chunked): 413, as soon
//     as the length or the running total says so, not after reading it;
//   - malformed or conflicting framing (two different Content-Length values, Content-Length
//     beside chunked, a bad chunk size, a body without a length, which reads as a malformed
//     next request): 400.
#pragma once

#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "worker/frontends/http_message.hpp"

namespace hotswap::worker {

struct HttpLimits {
  std::size_t max_header_bytes = 64u << 10;
  std::size_t max_body_bytes = 64u << 20;  // --max-request-bytes
  // From the first wait for a request (a kept-alive connection's idle time included) to its last
  // header byte, however the bytes trickle in.
  std::chrono::milliseconds header_timeout{10'000};  // --http-header-timeout
  // From the end of the header to the last byte of the body.
  std::chrono::milliseconds body_timeout{60'000};  // --http-body-timeout
  // For each write of a response (a whole body, or one piece of a stream) to reach the socket:
  // a client that stops reading is dropped.
  std::chrono::milliseconds write_timeout{60'000};
};

// A request refused by the HTTP layer itself: the status and why, for the JSON error body.
struct HttpRefusal {
  int status = 400;
  std::string message;
};

using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Sets the parser's header and body limits.
void apply_limits(RequestParser& parser, const HttpLimits& limits);

// What a parse error means to the client (400, 413 or 431, and why).
HttpRefusal refusal_for(const boost::system::error_code& error, const HttpLimits& limits);

// Checks of a complete header that Beast leaves to the application; nothing when it is fine.
std::optional<HttpRefusal> check_header(const RequestParser& parser);

// The parsed message as routes read it (path and query decoded, header names lower-cased).
HttpRequest to_http_request(boost::beast::http::request<boost::beast::http::string_body>&& message);

// One request from the front of `bytes`, read as the listener reads it.
struct HttpReadResult {
  std::optional<HttpRequest> request;  // a whole, acceptable request
  std::optional<HttpRefusal> refusal;  // refused: the connection would be answered and closed
  std::size_t consumed = 0;            // bytes of `bytes` it used (pipelined ones follow)
  bool incomplete = false;             // more bytes needed
};
HttpReadResult read_http_request(std::string_view bytes, const HttpLimits& limits);

// `text` with %XX escapes decoded (and '+' as a space when `plus_is_space`); a malformed escape
// stays as it was, as Python's urllib.parse.unquote leaves it.
std::string percent_decode(std::string_view text, bool plus_is_space);

}  // namespace hotswap::worker
