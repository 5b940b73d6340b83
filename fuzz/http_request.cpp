// The worker's HTTP request reader (worker/frontends/http_request_reader.hpp): Boost.Beast's parser
// under hotswap's limits and framing checks, then the conversion routes read (path and query
// percent-decoded, header names lower-cased). The first byte picks small or default limits;
// the rest is what a client sent, pipelined requests included.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz/fuzz_support.hpp"
#include "worker/frontends/http_request_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hotswap;
  if (size == 0) return 0;
  worker::HttpLimits limits;
  if (data[0] & 1) {
    limits.max_header_bytes = 256;
    limits.max_body_bytes = 64;
  }
  std::string_view bytes = fuzz::as_text(data + 1, size - 1);
  // Read request after request, as a kept-alive connection does.
  for (int i = 0; i < 16 && !bytes.empty(); ++i) {
    const worker::HttpReadResult read = worker::read_http_request(bytes, limits);
    HOTSWAP_FUZZ_CHECK(read.consumed <= bytes.size());
    HOTSWAP_FUZZ_CHECK(read.request.has_value() + read.refusal.has_value() + read.incomplete == 1);
    if (read.refusal) {
      const int status = read.refusal->status;
      HOTSWAP_FUZZ_CHECK(status == 400 || status == 413 || status == 431);
      HOTSWAP_FUZZ_CHECK(!read.refusal->message.empty());
      return 0;
    }
    if (read.incomplete) return 0;
    const worker::HttpRequest& request = *read.request;
    // Whatever the framing said, no body past the limit reaches a route.
    HOTSWAP_FUZZ_CHECK(request.body.size() <= limits.max_body_bytes);
    HOTSWAP_FUZZ_CHECK(!request.method.empty());
    for (const auto& [name, value] : request.headers) {
      for (char c : name)
        HOTSWAP_FUZZ_CHECK(!(c >= 'A' && c <= 'Z'));
    }
    HOTSWAP_FUZZ_CHECK(read.consumed > 0);
    bytes.remove_prefix(read.consumed);
  }
  return 0;
}
