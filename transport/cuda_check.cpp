#include "transport/cuda_check.hpp"

#include <string>
#include <string_view>

#include "protocol/errors.hpp"

namespace hotswap::transport {

namespace {

// Where the failing call is in hotswap's sources, from the top of the tree
// ("transport/device.cpp:117"): __FILE__ is the path the build machine compiled, which says
// nothing to the user and leaks the build's folders. This file's own __FILE__ ends in
// "transport/cuda_check.cpp", so what comes before that is the tree's root on that machine.
std::string call_site(const char* file, int line) {
  static const std::string_view own = __FILE__;
  static const std::string_view root =
      own.substr(0, own.size() - std::string_view("transport/cuda_check.cpp").size());
  std::string_view path = file;
  if (path.starts_with(root)) path.remove_prefix(root.size());
  return std::string(path) + ":" + std::to_string(line);
}

}  // namespace

// What failed and why first; the call's site, from the tree's root, last.
void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw protocol::TransferError(std::string(call) + " failed: " + cudaGetErrorName(status) + " (" +
                                cudaGetErrorString(status) + ") [at " + call_site(file, line) +
                                "]");
}

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  throw protocol::TransferError(std::string(call) + " failed: " + ncclGetErrorString(status) +
                                " [at " + call_site(file, line) + "]");
}

}  // namespace hotswap::transport
