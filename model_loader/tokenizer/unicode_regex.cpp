#define PCRE2_CODE_UNIT_WIDTH 8
#include "model_loader/tokenizer/unicode_regex.hpp"

#include <pcre2.h>

#include <cstdint>

#include "model_loader/tokenizer/byte_level.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader {
namespace {

thread_local const std::function<bool()>* t_cancelled = nullptr;

}  // namespace

UnicodeRegex::CancelScope::CancelScope(const std::function<bool()>& cancelled)
    : previous_(t_cancelled) {
  t_cancelled = cancelled ? &cancelled : previous_;
}

UnicodeRegex::CancelScope::~CancelScope() {
  t_cancelled = previous_;
}

struct UnicodeRegex::Handles {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;
  ~Handles() {
    if (match != nullptr) pcre2_match_data_free(match);
    if (code != nullptr) pcre2_code_free(code);
  }
};

UnicodeRegex::UnicodeRegex(const std::string& pattern)
    : pattern_(pattern), handles_(std::make_unique<Handles>()) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  handles_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                 PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (handles_->code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw protocol::ValueError("the tokenizer's regex '" + pattern + "' does not compile at " +
                               std::to_string(offset) + ": " +
                               reinterpret_cast<const char*>(message));
  }
  // JIT where the platform has it: several times faster on long texts; matching works without.
  pcre2_jit_compile(handles_->code, PCRE2_JIT_COMPLETE);
  handles_->match = pcre2_match_data_create_from_pattern(handles_->code, nullptr);
}

UnicodeRegex::~UnicodeRegex() = default;
UnicodeRegex::UnicodeRegex(UnicodeRegex&&) noexcept = default;
UnicodeRegex& UnicodeRegex::operator=(UnicodeRegex&&) noexcept = default;

std::vector<std::pair<std::size_t, std::size_t>> UnicodeRegex::find_all(
    std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> found;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t at = 0;
  // PCRE2 checks that the subject is valid UTF-8 on every call, from the start offset to the
  // end: once per match, which made splitting quadratic in the text (400 KB took 12 s). The
  // first call checks it all; the others are told it has been checked.
  std::uint32_t options = 0;
  const std::function<bool()>* cancelled = t_cancelled;
  while (at <= text.size()) {
    if (cancelled != nullptr && found.size() % 4096 == 4095 && (*cancelled)()) {
      throw protocol::RuntimeError(
          "tokenizing was cancelled: the client went away or the worker is stopping");
    }
    const int rc =
        pcre2_match(handles_->code, subject, text.size(), at, options, handles_->match, nullptr);
    options = PCRE2_NO_UTF_CHECK;
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(rc, message, sizeof(message));
      throw protocol::ValueError("the tokenizer's regex '" + pattern_ +
                                 "' failed on the text: " + reinterpret_cast<const char*>(message));
    }
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(handles_->match);
    const std::size_t begin = ovector[0], end = ovector[1];
    if (end > begin) found.emplace_back(begin, end);
    at = end > begin ? end : (end < text.size() ? end + utf8_length(text, end) : end + 1);
  }
  return found;
}

}  // namespace hotswap::model_loader
