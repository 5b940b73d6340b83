#include "worker/frontends/http_message.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

namespace hotswap::worker {
namespace {

bool same_name(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

}  // namespace

std::optional<std::string> HttpRequest::header(std::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (same_name(key, name)) return value;
  }
  return std::nullopt;
}

std::optional<std::string> HttpRequest::query_value(std::string_view key) const {
  for (const auto& [k, value] : query) {
    if (k == key) return value;
  }
  return std::nullopt;
}

HttpResponse json_error(int status, const std::string& message, const std::string& type) {
  using nlohmann::json;
  HttpResponse response;
  response.status = status;
  // FastAPI puts an HTTPException's text in `detail`; vLLM's error responses use `error`.
  const json body = {{"error", {{"message", message}, {"type", type}}}, {"detail", message}};
  // Invalid UTF-8 quoted in an error message is replaced, never a failed reply.
  response.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return response;
}

}  // namespace hotswap::worker
