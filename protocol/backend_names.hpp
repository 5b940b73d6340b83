// The built-in weight-transfer backends, named once: the `backend` of weight_transfer_config
// on the worker and of each trainer init info, as vLLM names its engines where it has them
// ("nccl", "ipc"; "sparse_nccl" is vLLM's sparse wire). The receiver factory, the trainer
// factory, hotswap-trainer and the Python bindings all take their names from here; a plugin
// registers any other name at run time.
#pragma once

#include <array>
#include <string_view>

namespace hotswap::protocol::backends {

inline constexpr std::string_view kNccl = "nccl";
inline constexpr std::string_view kSparseNccl = "sparse_nccl";
inline constexpr std::string_view kIpc = "ipc";
inline constexpr std::string_view kGloo = "gloo";
inline constexpr std::string_view kShm = "shm";
inline constexpr std::string_view kSparseGloo = "sparse_gloo";
inline constexpr std::string_view kDisk = "disk";

// Every built-in backend: the CPU planes first (they run everywhere), then the GPU planes.
inline constexpr std::array<std::string_view, 7> kBuiltin = {kGloo, kShm,        kSparseGloo, kDisk,
                                                             kNccl, kSparseNccl, kIpc};

}  // namespace hotswap::protocol::backends
