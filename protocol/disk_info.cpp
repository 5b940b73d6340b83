#include "protocol/disk_info.hpp"

#include <filesystem>
#include <system_error>

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {

DiskInitInfo DiskInitInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, "DiskWeightTransferInitInfo", {});
  fields.finish();
  return {};
}

DiskUpdateInfo DiskUpdateInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, "DiskWeightTransferUpdateInfo", {"path"});
  DiskUpdateInfo info;
  info.path = fields.required_string("path");
  fields.finish();

  namespace fs = std::filesystem;
  if (info.path.empty()) throw ValueError("`path` must be a non-empty absolute local directory");
  fs::path path(info.path);
  if (!path.is_absolute()) throw ValueError("`path` must be an absolute local directory");
  std::error_code ec;
  if (!fs::is_directory(path, ec)) {
    throw ValueError("Shared-disk checkpoint path must be a local directory: " + info.path);
  }
  // A glob, as vLLM's check is: an entry that is no regular file (a FIFO) is refused by name
  // when the checkpoint is opened, rather than passed over here.
  bool has_safetensors = false;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->path().extension() == ".safetensors") {
      has_safetensors = true;
      break;
    }
  }
  if (!has_safetensors) {
    throw ValueError("Shared-disk checkpoint directory contains no safetensors files: " +
                     info.path);
  }
  return info;
}

}  // namespace hotswap::protocol
