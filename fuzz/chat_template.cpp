// A chat template as the worker renders one it was given (a model's, or a request's with
// --trust-request-chat-template): Jinja2 in the embedded interpreter, sandboxed and bounded.
// Whatever the template, the render ends within its time bound with text within its output
// bound, or with a ValueError that can be sent back; nothing else (no other exception, no crash,
// no hang). Memory is bounded only where `*`, `**` and `+` build sequences; a single call that
// allocates in C (a huge `center` or format width) is not, and libFuzzer's RSS limit says so.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz/fuzz_support.hpp"
#include "protocol/errors.hpp"
#include "worker/serving/jinja_renderer.hpp"

namespace {

using namespace hotswap;

const nlohmann::ordered_json& variables() {
  static const nlohmann::ordered_json v = {
      {"messages",
       {{{"role", "system"}, {"content", "Be brief."}},
        {{"role", "user"}, {"content", "Grüße, 世界"}},
        {{"role", "assistant"},
         {"content", ""},
         {"tool_calls",
          {{{"type", "function"}, {"function", {{"name", "f"}, {"arguments", {{"x", 1}}}}}}}}}}},
      {"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}},
      {"documents", nullptr},
      {"add_generation_prompt", true},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"}};
  return v;
}

}  // namespace

// The interpreter allocates for the life of the process in ways leak checking cannot follow (its
// objects are found through its own tagged lists), and so does the OpenSSL its hashlib loads:
// neither is hotswap's, and this target is the only one that loads them.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libpython3\nleak:libcrypto.so\n";
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  worker::RenderLimits limits;
  limits.time = std::chrono::milliseconds(200);
  limits.max_chars = 64 << 10;
  limits.max_template_bytes = 16 << 10;
  const std::string source(fuzz::as_text(data, size));
  try {
    const std::string text = worker::JinjaRenderer::instance().render(source, variables(), limits);
    // Characters, not bytes, are bounded: a character is at most 4 bytes of UTF-8.
    HOTSWAP_FUZZ_CHECK(text.size() <= 4 * limits.max_chars);
  } catch (const protocol::Error& e) {
    fuzz::check_error_reply(e);
  }
  try {
    worker::JinjaRenderer::instance().iterates_over_content(source, limits);
  } catch (const protocol::Error& e) {
    fuzz::check_error_reply(e);
  }
  return 0;
}
