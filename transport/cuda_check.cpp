#include "transport/cuda_check.hpp"

#include <string>

#include "protocol/errors.hpp"

namespace hotswap::transport {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw protocol::TransferError(std::string(call) + " failed at " + file + ":" +
                                std::to_string(line) + ": " + cudaGetErrorName(status) + " (" +
                                cudaGetErrorString(status) + ")");
}

void throw_nccl_error(ncclResult_t status, const char* call, const char* file, int line) {
  throw protocol::TransferError(std::string(call) + " failed at " + file + ":" +
                                std::to_string(line) + ": " + ncclGetErrorString(status));
}

}  // namespace hotswap::transport
