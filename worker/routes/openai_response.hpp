// What every OpenAI-compatible route's answers share: vLLM's error object and the ids and
// creation times its responses carry.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include <nlohmann/json.hpp>

namespace hotswap::worker {

// An error as vLLM's OpenAI-compatible server answers it: the HTTP status and
// {"error": {message, type, param, code}}.
struct OpenAiError {
  int status = 500;
  nlohmann::ordered_json body;
};
OpenAiError openai_error(const std::exception& e);

// `digits` random lowercase hex digits: the tail of vLLM's response ids ("cmpl-…").
std::string random_hex(std::size_t digits);
// Seconds since the epoch: a response's `created`.
std::int64_t unix_seconds();

}  // namespace hotswap::worker
