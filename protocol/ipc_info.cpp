#include "protocol/ipc_info.hpp"

#include "protocol/base64.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {
namespace {

constexpr const char* kInitType = "IPCWeightTransferInitInfo";
constexpr const char* kUpdateType = "IPCWeightTransferUpdateInfo";

IpcHandle parse_handle(const nlohmann::json& value, const std::string& where) {
  JsonFields fields(value, std::string(kUpdateType) + " " + where,
                    {"handle", "offset_bytes", "size_bytes"});
  std::string b64 = fields.required_string("handle");
  std::int64_t offset = fields.required_int("offset_bytes");
  std::int64_t size = fields.required_int("size_bytes");
  fields.finish();
  auto bytes = base64_decode(b64);
  if (!bytes) {
    throw ValueError(std::string(kUpdateType) + ": " + where +
                     " `handle` is not valid standard base64");
  }
  if (bytes->size() != kCudaIpcHandleBytes) {
    throw ValueError(std::string(kUpdateType) + ": " + where +
                     " `handle` must decode to 64 bytes (a cudaIpcMemHandle_t), got " +
                     std::to_string(bytes->size()));
  }
  if (offset < 0 || size < 0) {
    throw ValueError(std::string(kUpdateType) + ": " + where +
                     " `offset_bytes` and `size_bytes` must be non-negative");
  }
  return IpcHandle{std::move(*bytes), static_cast<std::uint64_t>(offset),
                   static_cast<std::uint64_t>(size)};
}

IpcHandleSet parse_handle_set(const nlohmann::json& value, const std::string& where) {
  if (!value.is_object() || value.empty()) {
    throw ValueError(std::string(kUpdateType) + ": " + where +
                     " must be a non-empty object {gpu_uuid: {handle, offset_bytes, size_bytes}}, "
                     "got " +
                     describe_json(value));
  }
  IpcHandleSet set;
  for (const auto& [uuid, handle] : value.items()) {
    set.emplace(uuid, parse_handle(handle, where + "['" + uuid + "']"));
  }
  return set;
}

nlohmann::json handle_set_to_json(const IpcHandleSet& set) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [uuid, h] : set) {
    out[uuid] = {{"handle", base64_encode(h.handle)},
                 {"offset_bytes", h.offset_bytes},
                 {"size_bytes", h.size_bytes}};
  }
  return out;
}

}  // namespace

IpcInitInfo IpcInitInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kInitType, {"packed"}, /*keyword_only=*/true);
  IpcInitInfo info;
  info.packed = fields.optional_bool("packed").value_or(false);
  fields.finish();
  return info;
}

nlohmann::json IpcInitInfo::to_json() const {
  return {{"packed", packed}};
}

IpcUpdateInfo IpcUpdateInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kUpdateType,
                    {"names", "dtype_names", "shapes", "ipc_handles", "ipc_handles_pickled",
                     "tensor_sizes", "packed", "is_checkpoint_format"});
  auto names = fields.required_string_list("names");
  auto dtype_names = fields.required_string_list("dtype_names");
  auto shapes = fields.required_shape_list("shapes");
  auto handles = fields.optional_value("ipc_handles");
  auto pickled = fields.optional_value("ipc_handles_pickled");
  auto tensor_sizes = fields.optional_int_list("tensor_sizes");
  auto packed_flag = fields.optional_bool("packed");  // E1 carried it per update
  (void)fields.optional_bool("is_checkpoint_format");
  fields.finish();

  const std::string prefix = std::string(kUpdateType) + ": ";
  IpcUpdateInfo info;
  info.params = params_from_lists(kUpdateType, names, dtype_names, shapes);
  // vLLM's checks, in vLLM's order.
  if (handles && pickled) {
    throw ValueError(prefix + "Cannot specify both `ipc_handles` and `ipc_handles_pickled`");
  }
  if (pickled) {
    throw ValueError(prefix +
                     "hotswap never deserializes `ipc_handles_pickled` (a Python pickle); send "
                     "`ipc_handles` as JSON: {gpu_uuid: {handle (base64), offset_bytes, "
                     "size_bytes}}");
  }
  if (!handles) {
    throw ValueError(prefix + "Either `ipc_handles` or `ipc_handles_pickled` must be provided");
  }
  bool packed = handles->is_object() || packed_flag.value_or(false);
  if (!packed) {
    if (!handles->is_array()) fields.type_error("ipc_handles", "a list or an object", *handles);
    if (handles->size() != names.size()) {
      throw ValueError(prefix + "`ipc_handles` should be of the same size as `names`: got " +
                       std::to_string(handles->size()) + " and " + std::to_string(names.size()));
    }
    for (std::size_t i = 0; i < handles->size(); ++i) {
      std::string where = "`ipc_handles[" + std::to_string(i) + "]`";
      IpcHandleSet set = parse_handle_set((*handles)[i], where);
      for (const auto& [uuid, handle] : set) {
        if (handle.size_bytes != info.params[i].nbytes()) {
          throw ValueError(prefix + where + " for " + uuid + " exports " +
                           std::to_string(handle.size_bytes) + " bytes but '" +
                           info.params[i].name + "' has " +
                           std::to_string(info.params[i].nbytes()));
        }
      }
      info.handles.push_back(std::move(set));
    }
    if (tensor_sizes) {
      throw ValueError(prefix + "`tensor_sizes` is only meaningful when packed=True");
    }
    return info;
  }

  if (!handles->is_object()) {
    throw ValueError(prefix +
                     "`ipc_handles` must be one {gpu_uuid: handle} object when packed=True (one "
                     "buffer per chunk), got " +
                     describe_json(*handles));
  }
  if (!tensor_sizes) throw ValueError(prefix + "`tensor_sizes` is required when packed=True");
  if (tensor_sizes->size() != names.size()) {
    throw ValueError(prefix + "`tensor_sizes` should be of the same size as `names`: got " +
                     std::to_string(tensor_sizes->size()) + " and " + std::to_string(names.size()));
  }
  info.packed_handle = parse_handle_set(*handles, "`ipc_handles`");
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < tensor_sizes->size(); ++i) {
    std::uint64_t expected = info.params[i].nbytes();
    if ((*tensor_sizes)[i] < 0 || static_cast<std::uint64_t>((*tensor_sizes)[i]) != expected) {
      throw ValueError(prefix + "`tensor_sizes[" + std::to_string(i) + "]` is " +
                       std::to_string((*tensor_sizes)[i]) + " bytes but '" + info.params[i].name +
                       "' (" + std::string(dtype_name(info.params[i].dtype)) + " " +
                       shape_to_string(info.params[i].shape) + ") has " + std::to_string(expected));
    }
    info.tensor_sizes.push_back(expected);
    if (__builtin_add_overflow(total, expected, &total)) {
      throw ValueError(prefix + "the chunk's `tensor_sizes` add up to more than 2^64 bytes");
    }
  }
  for (const auto& [uuid, handle] : *info.packed_handle) {
    if (total > handle.size_bytes) {
      throw ValueError(prefix + "the chunk's `tensor_sizes` add up to " + std::to_string(total) +
                       " bytes but the buffer exported for " + uuid + " holds " +
                       std::to_string(handle.size_bytes));
    }
  }
  return info;
}

nlohmann::json IpcUpdateInfo::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  write_param_lists(params, out);
  if (packed_handle) {
    out["ipc_handles"] = handle_set_to_json(*packed_handle);
    out["tensor_sizes"] = tensor_sizes;
  } else {
    auto list = nlohmann::json::array();
    for (const auto& set : handles)
      list.push_back(handle_set_to_json(set));
    out["ipc_handles"] = std::move(list);
  }
  return out;
}

}  // namespace hotswap::protocol
