#include "worker/frontends/http_request_reader.hpp"

#include <boost/asio/buffer.hpp>
#include <boost/beast/http/error.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <limits>

namespace hotswap::worker {
namespace http = boost::beast::http;

namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// Beast 1.74's string_view is Boost's, not std's.
std::string text_of(boost::beast::string_view view) {
  return {view.data(), view.size()};
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::string percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int high = hex_value(text[i + 1]), low = hex_value(text[i + 2]);
      if (high >= 0 && low >= 0) {
        out += static_cast<char>(high * 16 + low);
        i += 2;
        continue;
      }
    }
    out += plus_is_space && c == '+' ? ' ' : c;
  }
  return out;
}

void apply_limits(RequestParser& parser, const HttpLimits& limits) {
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(limits.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(limits.max_body_bytes);
}

HttpRefusal refusal_for(const boost::system::error_code& error, const HttpLimits& limits) {
  if (error == http::error::body_limit) {
    return {413, "the request body is over the worker's limit of " +
                     std::to_string(limits.max_body_bytes) + " bytes (--max-request-bytes)"};
  }
  if (error == http::error::header_limit) {
    return {431, "the request's header is over the worker's limit of " +
                     std::to_string(limits.max_header_bytes) + " bytes"};
  }
  if (error == http::error::bad_content_length) {
    return {400, "malformed or conflicting Content-Length"};
  }
  if (error == http::error::bad_transfer_encoding) {
    return {400, "malformed Transfer-Encoding, or one beside Content-Length"};
  }
  if (error == http::error::bad_chunk || error == http::error::bad_chunk_extension) {
    return {400, "malformed chunk in a chunked body"};
  }
  return {400, "Invalid HTTP request received: " + error.message()};
}

std::optional<HttpRefusal> check_header(const RequestParser& parser) {
  const auto& message = parser.get();
  // Beast reads the last of several Content-Length fields; two that disagree are refused, as a
  // request smuggled past a proxy that read the other would be.
  std::optional<std::string> length;
  for (const auto& field : message) {
    if (field.name() != http::field::content_length) continue;
    const std::string value = text_of(field.value());
    if (length && *length != value) {
      return HttpRefusal{
          400, "conflicting Content-Length headers ('" + *length + "' and '" + value + "')"};
    }
    length = value;
  }
  if (message.count(http::field::transfer_encoding) != 0) {
    if (!parser.chunked()) {
      return HttpRefusal{400, "only the chunked Transfer-Encoding is supported"};
    }
    if (length) {
      return HttpRefusal{400,
                         "a request cannot carry both Content-Length and "
                         "Transfer-Encoding"};
    }
  }
  return std::nullopt;
}

HttpRequest to_http_request(http::request<http::string_body>&& message) {
  HttpRequest request;
  request.method = text_of(message.method_string());
  request.target = text_of(message.target());
  const std::string_view target = request.target;
  const std::size_t mark = target.find('?');
  request.path = percent_decode(target.substr(0, mark), /*plus_is_space=*/false);
  if (mark != std::string_view::npos) {
    std::string_view query = target.substr(mark + 1);
    while (!query.empty()) {
      const std::size_t amp = query.find('&');
      const std::string_view pair = query.substr(0, amp);
      query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
      if (pair.empty()) continue;
      const std::size_t eq = pair.find('=');
      request.query.emplace_back(
          percent_decode(pair.substr(0, eq), true),
          eq == std::string_view::npos ? std::string{} : percent_decode(pair.substr(eq + 1), true));
    }
  }
  for (const auto& field : message)
    request.headers.emplace_back(lower(text_of(field.name_string())), text_of(field.value()));
  request.body = std::move(message.body());
  return request;
}

HttpReadResult read_http_request(std::string_view bytes, const HttpLimits& limits) {
  HttpReadResult result;
  RequestParser parser;
  apply_limits(parser, limits);
  parser.eager(true);
  bool header_checked = false;
  while (!parser.is_done()) {
    boost::system::error_code error;
    const std::size_t used = parser.put(
        boost::asio::const_buffer(bytes.data() + result.consumed, bytes.size() - result.consumed),
        error);
    result.consumed += used;
    if (error == http::error::need_more) {
      result.incomplete = true;
      return result;
    }
    if (error) {
      result.refusal = refusal_for(error, limits);
      return result;
    }
    if (parser.is_header_done() && !header_checked) {
      header_checked = true;
      if (auto refusal = check_header(parser)) {
        result.refusal = std::move(refusal);
        return result;
      }
    }
    if (used == 0 && !parser.is_done()) {
      result.incomplete = true;
      return result;
    }
  }
  result.request = to_http_request(parser.release());
  return result;
}

}  // namespace hotswap::worker
