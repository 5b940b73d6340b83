#include "worker/routes/openai_response.hpp"

#include <chrono>
#include <random>

#include "protocol/errors.hpp"

namespace hotswap::worker {

OpenAiError openai_error(const std::exception& e) {
  // Status, type and param from protocol's one table (a model not served: 404 naming `model`).
  const int answered = protocol::http_status(e);
  const std::string type(protocol::openai_error_type(answered));
  const std::string_view field = protocol::openai_error_param(e);
  const nlohmann::ordered_json param =
      field.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(std::string(field));
  return {
      answered,
      {{"error", {{"message", e.what()}, {"type", type}, {"param", param}, {"code", answered}}}}};
}

std::string random_hex(std::size_t digits) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  while (out.size() < digits) {
    auto bits = rng();
    for (int i = 0; i < 16 && out.size() < digits; ++i, bits >>= 4)
      out += kHex[bits & 15];
  }
  return out;
}

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace hotswap::worker
