// One line that says why something failed. libtorch's errors (c10::Error, and the distributed
// errors derived from it) carry a C++ backtrace in what(): dozens of lines a user must not have
// to read to learn that a peer closed its connection. This keeps the message and drops the
// backtrace and anything after the message's first line.
#pragma once

#include <exception>
#include <string>

namespace hotswap::transport {

std::string one_line_cause(const std::exception& error);

}  // namespace hotswap::transport
