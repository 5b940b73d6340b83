// What every fuzz target shares: the input as text, the invariant check that aborts (a finding
// for libFuzzer), and the check that an expected error can still be answered.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"

namespace hotswap::fuzz {

inline std::string_view as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// `text` with every byte outside printable ASCII written as \xNN, for stderr.
inline std::string printable(std::string_view text) {
  std::string out;
  for (unsigned char c : text) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char hex[5];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    }
  }
  return out;
}

[[noreturn]] inline void invariant_broken(const char* condition, const char* file, int line) {
  std::fprintf(stderr, "%s:%d: fuzz invariant broken: %s\n", file, line, condition);
  std::abort();
}

// Runs `step`, which must succeed: any exception, an expected kind too, is a finding.
template <class Step>
auto must_succeed(const char* what, Step&& step) -> decltype(step()) {
  try {
    return step();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s threw: %s\n", what, printable(e.what()).c_str());
    std::abort();
  }
}

// The nesting depth of arrays and objects in `value` (0 for a scalar).
inline std::size_t json_depth(const nlohmann::json& value) {
  if (!value.is_structured()) return 0;
  std::size_t deepest = 0;
  for (const auto& item : value) {
    const std::size_t d = json_depth(item);
    if (d > deepest) deepest = d;
  }
  return deepest + 1;
}

// A frame must be JSON that nlohmann reads back.
inline bool is_json(std::string_view frame) {
  return !nlohmann::json::parse(frame, nullptr, /*allow_exceptions=*/false).is_discarded();
}

// Every protocol::Error can end up in a JSON-RPC error reply (errors map to replies in one
// place, jsonrpc.cpp), and the worker builds that reply inside its catch block: a message
// nlohmann cannot serialize (bytes that are not UTF-8) would throw from there instead.
inline void check_error_reply(const protocol::Error& error) {
  std::string frame;
  try {
    frame = protocol::reply_frame(protocol::make_error(nullptr, error), "null");
  } catch (const nlohmann::json::exception& e) {
    std::fprintf(stderr, "the error reply cannot be serialized (%s); the message was: %s\n",
                 e.what(), printable(error.what()).c_str());
    std::abort();
  }
  if (!is_json(frame)) {
    std::fprintf(stderr, "the error reply is not JSON: %s\n", printable(frame).c_str());
    std::abort();
  }
}

}  // namespace hotswap::fuzz

// Aborts, naming the condition, when `condition` does not hold: libFuzzer reports a crash.
#define HOTSWAP_FUZZ_CHECK(condition) \
  ((condition) ? (void)0 : ::hotswap::fuzz::invariant_broken(#condition, __FILE__, __LINE__))
