#include "protocol/shm_info.hpp"

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {
namespace {
constexpr const char* kInitType = "ShmWeightTransferInitInfo";
constexpr const char* kUpdateType = "ShmWeightTransferUpdateInfo";
}  // namespace

bool is_valid_shm_name(const std::string& name) {
  return name.size() >= 2 && name.size() <= 255 && name[0] == '/' &&
         name.find('/', 1) == std::string::npos;
}

ShmInitInfo ShmInitInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kInitType, {"segment_names", "packed_buffer_size_bytes"},
                    /*keyword_only=*/true);
  ShmInitInfo info;
  info.segment_names = fields.required_string_list("segment_names");
  if (auto size = fields.optional_int("packed_buffer_size_bytes")) {
    info.packed_buffer_size_bytes = *size;
  }
  fields.finish();
  const std::string prefix = std::string(kInitType) + ": ";
  if (info.segment_names.empty()) {
    throw ValueError(prefix + "`segment_names` must name at least one shared-memory buffer");
  }
  for (std::size_t i = 0; i < info.segment_names.size(); ++i) {
    if (!is_valid_shm_name(info.segment_names[i])) {
      throw ValueError(prefix + "`segment_names[" + std::to_string(i) +
                       "]` must be a POSIX shared-memory name like '/hotswap-1234-0' (a leading "
                       "'/', no other '/', at most 255 characters), got '" +
                       info.segment_names[i] + "'");
    }
  }
  if (info.packed_buffer_size_bytes <= 0) {
    throw ValueError(prefix + "`packed_buffer_size_bytes` must be positive, got " +
                     std::to_string(info.packed_buffer_size_bytes));
  }
  return info;
}

nlohmann::json ShmInitInfo::to_json() const {
  return {{"segment_names", segment_names}, {"packed_buffer_size_bytes", packed_buffer_size_bytes}};
}

ShmUpdateInfo ShmUpdateInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kUpdateType, {"names", "dtype_names", "shapes", "first_sequence"});
  auto names = fields.required_string_list("names");
  auto dtype_names = fields.required_string_list("dtype_names");
  auto shapes = fields.required_shape_list("shapes");
  auto first = fields.required_int("first_sequence");
  fields.finish();
  if (first < 1) {
    throw ValueError(std::string(kUpdateType) + ": `first_sequence` must be at least 1, got " +
                     std::to_string(first));
  }
  return ShmUpdateInfo{params_from_lists(kUpdateType, names, dtype_names, shapes), first};
}

nlohmann::json ShmUpdateInfo::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  write_param_lists(params, out);
  out["first_sequence"] = first_sequence;
  return out;
}

}  // namespace hotswap::protocol
