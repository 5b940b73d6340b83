// What the kernel interface decides without a GPU: whether the kernels were built, and which
// shapes they were instantiated for (the instantiation files list the same ones).
#include "model_loader/kernels/flashinfer_kernels.hpp"

#ifdef HOTSWAP_WITH_KERNELS
#include <cuda_runtime_api.h>
#endif

namespace hotswap::model_loader::kernels {

bool kernels_built() {
#ifdef HOTSWAP_WITH_KERNELS
  return true;
#else
  return false;
#endif
}

std::string describe_kernel_status(KernelStatus status) {
  if (status == kNotBuilt) {
    return "this build has no GPU kernels (hotswap_kernels was built without FlashInfer's "
           "headers or without CUDA)";
  }
#ifdef HOTSWAP_WITH_KERNELS
  const auto error = static_cast<cudaError_t>(status);
  return std::string(cudaGetErrorName(error)) + ": " + cudaGetErrorString(error);
#else
  return "CUDA status " + std::to_string(status);
#endif
}

bool attention_head_dim_supported(std::uint32_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

bool decode_group_size_supported(std::uint32_t group_size) {
  switch (group_size) {  // FlashInfer's DISPATCH_GQA_GROUP_SIZE
    case 1:
    case 2:
    case 3:
    case 4:
    case 6:
    case 8:
    case 16:
      return true;
    default:
      return false;
  }
}

}  // namespace hotswap::model_loader::kernels
