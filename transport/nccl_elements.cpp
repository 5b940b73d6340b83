// nccl_elements_of: in every build, so the dtype mapping is tested where NCCL is absent too.
#include "transport/nccl_communicator.hpp"

namespace hotswap::transport {

NcclElements nccl_elements_of(const at::Tensor& tensor) {
  // ncclDataType_t values, as vLLM's ncclDataTypeEnum.from_torch maps them.
  constexpr int kInt8 = 0, kUint8 = 1, kInt32 = 2, kInt64 = 4, kFloat16 = 6, kFloat32 = 7,
                kFloat64 = 8, kBfloat16 = 9;
  const auto n = static_cast<std::size_t>(tensor.numel());
  switch (tensor.scalar_type()) {
    case at::kChar:
      return {kInt8, n};
    case at::kByte:
      return {kUint8, n};
    case at::kInt:
      return {kInt32, n};
    case at::kLong:
      return {kInt64, n};
    case at::kHalf:
      return {kFloat16, n};
    case at::kFloat:
      return {kFloat32, n};
    case at::kDouble:
      return {kFloat64, n};
    case at::kBFloat16:
      return {kBfloat16, n};
    default:
      return {kUint8, static_cast<std::size_t>(tensor.nbytes())};
  }
}

}  // namespace hotswap::transport
