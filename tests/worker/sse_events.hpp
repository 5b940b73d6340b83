// The `data:` payloads of a server-sent event stream as vLLM's OpenAI routes send it, its framing
// checked on the way: for the completions and chat completions tests.
#pragma once

#include <boost/test/unit_test.hpp>

#include <string>
#include <vector>

namespace hotswap::testing {

inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> events;
  std::size_t at = 0;
  while (at < body.size()) {
    const auto end = body.find("\n\n", at);
    BOOST_REQUIRE_MESSAGE(end != std::string::npos, "an event without its blank line");
    const std::string event = body.substr(at, end - at);
    BOOST_REQUIRE_MESSAGE(event.starts_with("data: "), event);
    events.push_back(event.substr(6));
    at = end + 2;
  }
  BOOST_REQUIRE(!events.empty());
  BOOST_TEST(events.back() == "[DONE]");
  return events;
}

}  // namespace hotswap::testing
