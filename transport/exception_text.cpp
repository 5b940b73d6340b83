#include "transport/exception_text.hpp"

#include <c10/util/Exception.h>

namespace hotswap::transport {

std::string one_line_cause(const std::exception& error) {
  std::string text;
  if (const auto* torch_error = dynamic_cast<const c10::Error*>(&error)) {
    text = torch_error->what_without_backtrace();
  } else {
    text = error.what();
  }
  // libtorch prefixes "[enforce fail at ...] " and appends "Exception raised from ...".
  if (auto end = text.find('\n'); end != std::string::npos) text.resize(end);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r'))
    text.pop_back();
  return text;
}

}  // namespace hotswap::transport
