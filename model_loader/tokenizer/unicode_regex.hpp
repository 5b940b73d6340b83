// UnicodeRegex: a PCRE2 pattern compiled for UTF-8 text with Unicode properties (\p{L}, \p{N},
// a Unicode \s), owning its code and match data (RAII over the C handles). Tokenizers' split
// patterns (GPT-2's, Llama-3's, Qwen2's) need lookahead and Unicode classes that std::regex
// does not have.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotswap::model_loader {

class UnicodeRegex {
 public:
  // ValueError naming the pattern and PCRE2's message when it does not compile.
  explicit UnicodeRegex(const std::string& pattern);
  ~UnicodeRegex();
  UnicodeRegex(UnicodeRegex&&) noexcept;
  UnicodeRegex& operator=(UnicodeRegex&&) noexcept;

  // Every non-overlapping match in `text` (valid UTF-8), as [begin, end) byte offsets, left to
  // right. An empty match advances by one character. Not thread-safe (one match buffer).
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

  // While one lives on a thread, find_all on that thread asks `cancelled` every few thousand
  // matches and throws a RuntimeError when it says true: splitting megabytes of text runs deep
  // inside a tokenizer's pre-tokenizer, where no parameter reaches. Scopes nest.
  class CancelScope {
   public:
    explicit CancelScope(const std::function<bool()>& cancelled);
    ~CancelScope();
    CancelScope(const CancelScope&) = delete;
    CancelScope& operator=(const CancelScope&) = delete;

   private:
    const std::function<bool()>* previous_;
  };

 private:
  struct Handles;
  std::string pattern_;
  std::unique_ptr<Handles> handles_;
};

}  // namespace hotswap::model_loader
