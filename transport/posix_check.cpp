#include "transport/posix_check.hpp"

#include <cstring>
#include <string>

#include "protocol/errors.hpp"

namespace hotswap::transport {

void throw_posix_error(int error, const char* call, const char* context, const char* file,
                       int line) {
  std::string message = std::string(call) + " failed at " + file + ":" + std::to_string(line);
  if (context != nullptr && *context != '\0') message += " (" + std::string(context) + ")";
  throw protocol::RuntimeError(message + ": " + std::strerror(error));
}

}  // namespace hotswap::transport
