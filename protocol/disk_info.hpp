// The `disk` backend's payloads, as vLLM's shared-disk engine: init_info is `{}`, and each
// session's update_info names one checkpoint directory `{"path": "/abs/dir"}` that holds at
// least one `*.safetensors` file.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

struct DiskInitInfo {
  static DiskInitInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const { return nlohmann::json::object(); }
};

struct DiskUpdateInfo {
  std::string path;

  // Checks the path on this machine's file system, with vLLM's messages.
  static DiskUpdateInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const { return {{"path", path}}; }
};

}  // namespace hotswap::protocol
