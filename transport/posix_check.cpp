#include "transport/posix_check.hpp"

#include <cstring>

namespace hotswap::transport {

std::string PosixError::reason() const {
  return std::strerror(error_);
}

void throw_posix_error(int error, std::string_view action, std::string_view subject) {
  std::string message = "cannot " + std::string(action);
  if (!subject.empty()) message += " " + std::string(subject);
  throw PosixError(error, message + ": " + std::strerror(error));
}

}  // namespace hotswap::transport
