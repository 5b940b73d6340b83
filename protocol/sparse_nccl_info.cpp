#include "protocol/sparse_nccl_info.hpp"

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {
namespace {
constexpr const char* kUpdateType = "SparseNCCLWeightTransferUpdateInfo";
}

SparseNcclUpdateInfo SparseNcclUpdateInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kUpdateType, {"names", "dtype_names", "shapes", "num_updates_list"});
  auto names = fields.required_string_list("names");
  auto dtype_names = fields.required_string_list("dtype_names");
  auto shapes = fields.required_shape_list("shapes");
  auto num_updates = fields.required_int_list("num_updates_list");
  SparseNcclUpdateInfo info;
  fields.finish();

  info.params = params_from_lists(kUpdateType, names, dtype_names, shapes);
  const std::string prefix = std::string(kUpdateType) + ": ";
  if (num_updates.empty()) {
    throw ValueError(prefix + "`num_updates_list` cannot be empty for sparse updates");
  }
  if (num_updates.size() != names.size()) {
    throw ValueError(prefix + "`num_updates_list` should be of the same size as `names`: got " +
                     std::to_string(num_updates.size()) + " and " + std::to_string(names.size()));
  }
  for (std::size_t i = 0; i < num_updates.size(); ++i) {
    std::int64_t n = num_updates[i];
    if (n < 0) throw ValueError(prefix + "Sparse `num_updates_list` entries must be non-negative");
    // Indices are unique positions in the tensor, so there cannot be more than it has.
    if (static_cast<std::uint64_t>(n) > info.params[i].numel()) {
      throw ValueError(prefix + "'" + info.params[i].name + "' has " + std::to_string(n) +
                       " updates but shape " + shape_to_string(info.params[i].shape) +
                       " holds only " + std::to_string(info.params[i].numel()) + " elements");
    }
    // The wire carries int32 indices.
    if (info.params[i].numel() > static_cast<std::uint64_t>(INT32_MAX) + 1) {
      throw ValueError(prefix + "'" + info.params[i].name + "' has " +
                       std::to_string(info.params[i].numel()) +
                       " elements, more than int32 flat indices can address");
    }
  }
  info.num_updates_list = std::move(num_updates);
  return info;
}

nlohmann::json SparseNcclUpdateInfo::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  write_param_lists(params, out);
  out["num_updates_list"] = num_updates_list;
  return out;
}

}  // namespace hotswap::protocol
