// Check macro for POSIX calls: a failure throws a RuntimeError that names the call, its site and
// errno's text, so it reads like a backtrace:
//   "ftruncate(fd, size) failed at model_loader/mapped_file.cpp:40: No space left on device"
#pragma once

#include <cerrno>
#include <string>

namespace hotswap::transport {

[[noreturn]] void throw_posix_error(int error, const char* call, const char* context,
                                    const char* file, int line);

}  // namespace hotswap::transport

// `call` returning -1 (or MAP_FAILED for mmap) is a failure; `context` (a std::string) says on
// what, e.g. the file path.
#define HOTSWAP_POSIX_CHECK(call, context)                                                \
  do {                                                                                    \
    if ((call) == -1) {                                                                   \
      ::hotswap::transport::throw_posix_error(errno, #call, std::string(context).c_str(), \
                                              __FILE__, __LINE__);                        \
    }                                                                                     \
  } while (0)
