// POSIX failures as errors that read like a diagnosis: what was being done, to which path or
// object, and errno's text — "cannot open /models/x/model-00002.safetensors: No such file or
// directory" — never a macro's expression or a source line.
#pragma once

#include <cerrno>
#include <string>
#include <string_view>

#include "protocol/errors.hpp"

namespace hotswap::transport {

class PosixError : public protocol::RuntimeError {
 public:
  PosixError(int error, const std::string& message) : RuntimeError(message), error_(error) {}
  int error() const noexcept { return error_; }
  // errno's text: "No such file or directory".
  std::string reason() const;

 private:
  int error_;
};

// Throws PosixError "cannot <action> <subject>: <errno text>".
[[noreturn]] void throw_posix_error(int error, std::string_view action, std::string_view subject);

}  // namespace hotswap::transport

// `call` returning -1 is a failure: "cannot <action> <subject>: <errno text>".
#define HOTSWAP_POSIX_CHECK(call, action, subject)                                     \
  do {                                                                                 \
    if ((call) == -1) ::hotswap::transport::throw_posix_error(errno, action, subject); \
  } while (0)
