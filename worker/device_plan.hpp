// Which GPUs each replica's tensor-parallel ranks run on, decided once, before any process
// starts: rank r of a replica on cuda:K runs on cuda:K+r. A plan that needs a GPU the machine
// lacks, or that puts ranks of two replicas on one GPU, is refused here with a message naming
// the devices; started, it would leave rank 0 waiting out its NCCL init, or put two ranks of a
// trainer's nccl weight-transfer group (each replica's ranks are ranks of it) on one device,
// which NCCL may hang on. hotswap-launch checks the overlap for --devices only: replicas given
// one --device share it on purpose.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hotswap::worker {

// The CUDA indices of each replica's ranks, replica by replica (rank r at r); empty for a
// replica on the CPU.
using DevicePlan = std::vector<std::vector<int>>;

// `replica_devices` are the names a `--device` flag takes ("cpu", "cuda", "cuda:N"; "cuda" is
// cuda:0), one per replica, as `flag` gave them (named in the messages). `cuda_device_count`
// is the machine's, or nothing where the build cannot count them: then only the overlap
// between replicas is checked. Pure: asks no GPU. A ValueError for a malformed name, a
// tensor-parallel size under 1, two replicas sharing a GPU (checked first, so the answer does
// not depend on the machine), or a rank past the machine's last GPU.
DevicePlan plan_devices(const std::vector<std::string>& replica_devices, int tensor_parallel_size,
                        std::optional<int> cuda_device_count, std::string_view flag = "--device");

// plan_devices with this machine's GPU count, asked (of transport::gpu_runtime_info) only when
// a replica names a CUDA device, and known only in a build with CUDA.
DevicePlan plan_devices_on_this_machine(const std::vector<std::string>& replica_devices,
                                        int tensor_parallel_size,
                                        std::string_view flag = "--device");

}  // namespace hotswap::worker
