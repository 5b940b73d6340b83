#include "worker/device_plan.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>

#include "protocol/errors.hpp"
#include "transport/device.hpp"

namespace hotswap::worker {
namespace {

// The CUDA index a device name asks for, or nothing for the CPU. The same grammar as
// transport::parse_device, which cannot be asked here: it needs the machine.
std::optional<int> cuda_index_of(const std::string& name, std::string_view flag) {
  if (name == "cpu") return std::nullopt;
  if (name == "cuda") return 0;
  const std::string prefix = "cuda:";
  if (!name.starts_with(prefix) || name.size() == prefix.size() ||
      name.size() > prefix.size() + 4 ||
      name.find_first_not_of("0123456789", prefix.size()) != std::string::npos) {
    throw protocol::ValueError(std::string(flag) + " " + name + ": expected cpu, cuda or cuda:N");
  }
  return std::stoi(name.substr(prefix.size()));
}

// "cuda:3", or "cuda:2..cuda:3" for more than one device.
std::string device_range(long long first, long long count) {
  std::string text = "cuda:" + std::to_string(first);
  if (count > 1) text += "..cuda:" + std::to_string(first + count - 1);
  return text;
}

}  // namespace

DevicePlan plan_devices(const std::vector<std::string>& replica_devices, int tensor_parallel_size,
                        std::optional<int> cuda_device_count, std::string_view flag) {
  const std::string flag_text(flag);
  if (tensor_parallel_size < 1) {
    throw protocol::ValueError("--tensor-parallel-size " + std::to_string(tensor_parallel_size) +
                               ": must be at least 1");
  }
  std::vector<std::optional<int>> first;
  for (const auto& name : replica_devices)
    first.push_back(cuda_index_of(name, flag));

  const std::string with_size = tensor_parallel_size > 1 ? " with --tensor-parallel-size " +
                                                               std::to_string(tensor_parallel_size)
                                                         : "";
  // Overlap first: it is a fact of the flags alone, so the same flags are refused the same way
  // on every machine, with or without GPUs.
  for (std::size_t i = 0; i < first.size(); ++i) {
    for (std::size_t j = i + 1; j < first.size(); ++j) {
      if (!first[i] || !first[j]) continue;
      const int a = *first[i], b = *first[j];
      if (std::abs(a - b) >= tensor_parallel_size) continue;
      std::string message = flag_text + ": replicas " + std::to_string(i) + " and " +
                            std::to_string(j) + " both use cuda:" + std::to_string(std::max(a, b));
      if (tensor_parallel_size > 1) {
        message += " (replica " + std::to_string(i) + ": " + device_range(a, tensor_parallel_size) +
                   with_size + "; replica " + std::to_string(j) + ": " +
                   device_range(b, tensor_parallel_size) + ")";
      }
      throw protocol::ValueError(message);
    }
  }

  DevicePlan plan(first.size());
  for (std::size_t i = 0; i < first.size(); ++i) {
    if (!first[i]) continue;
    const long long last = static_cast<long long>(*first[i]) + tensor_parallel_size - 1;
    if (cuda_device_count && last >= *cuda_device_count) {
      const std::string who =
          replica_devices.size() == 1
              ? flag_text + " " + replica_devices[i]
              : flag_text + ": replica " + std::to_string(i) + " on " + replica_devices[i];
      throw protocol::ValueError(
          who + with_size + " needs " + device_range(*first[i], tensor_parallel_size) +
          ", but this machine has " + std::to_string(*cuda_device_count) + " GPU(s)" +
          (*cuda_device_count > 0 ? " (" + device_range(0, *cuda_device_count) + ")" : ""));
    }
    for (int r = 0; r < tensor_parallel_size; ++r)
      plan[i].push_back(*first[i] + r);
  }
  return plan;
}

DevicePlan plan_devices_on_this_machine(const std::vector<std::string>& replica_devices,
                                        int tensor_parallel_size, std::string_view flag) {
  std::optional<int> count;
  const bool names_cuda = std::any_of(replica_devices.begin(), replica_devices.end(),
                                      [](const std::string& name) { return name != "cpu"; });
  if (names_cuda) {
    const auto info = transport::gpu_runtime_info();
    if (info.built_with_cuda) count = info.device_count;
  }
  return plan_devices(replica_devices, tensor_parallel_size, count, flag);
}

}  // namespace hotswap::worker
