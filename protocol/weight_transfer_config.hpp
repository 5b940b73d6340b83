// WeightTransferConfig: the worker's backend selector, vLLM's `--weight-transfer-config`
// ('{"backend": "nccl"}'). It holds only the backend; wire params arrive at the handshake.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

struct WeightTransferConfig {
  std::string backend = "nccl";

  static WeightTransferConfig from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

}  // namespace hotswap::protocol
