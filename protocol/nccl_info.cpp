#include "protocol/nccl_info.hpp"

#include <string_view>
#include <unordered_map>

#include "protocol/base64.hpp"
#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {
namespace {

constexpr const char* kInitType = "NCCLWeightTransferInitInfo";
constexpr const char* kUpdateType = "NCCLWeightTransferUpdateInfo";

void check_packing_geometry(const std::string& type_name, std::optional<std::int64_t> buffer_size,
                            std::optional<std::int64_t> num_buffers) {
  if (buffer_size && *buffer_size <= 0) {
    throw ValueError(type_name + ": `packed_buffer_size_bytes` must be positive, got " +
                     std::to_string(*buffer_size));
  }
  if (num_buffers && *num_buffers < 1) {
    throw ValueError(type_name + ": `packed_num_buffers` must be at least 1, got " +
                     std::to_string(*num_buffers));
  }
}

}  // namespace

NcclInitInfo NcclInitInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(
      object, kInitType,
      {"master_address", "master_port", "rank_offset", "world_size", "nccl_unique_id_b64", "packed",
       "packed_buffer_size_bytes", "packed_num_buffers", "use_load_plan", "metadata"},
      /*keyword_only=*/true);
  NcclInitInfo info;
  info.master_address = fields.optional_string("master_address");
  info.master_port = fields.optional_int("master_port");
  info.rank_offset = fields.required_int("rank_offset");
  info.world_size = fields.required_int("world_size");
  info.nccl_unique_id_b64 = fields.optional_string("nccl_unique_id_b64");
  // vLLM 0.34 tests the id with bool(): an empty string is no id.
  if (info.nccl_unique_id_b64 && info.nccl_unique_id_b64->empty()) info.nccl_unique_id_b64.reset();
  info.use_load_plan = fields.optional_bool("use_load_plan").value_or(false);
  auto metadata = fields.optional_value("metadata");
  auto buffer_size = fields.optional_int("packed_buffer_size_bytes");
  auto num_buffers = fields.optional_int("packed_num_buffers");
  info.packing.packed = fields.optional_bool("packed").value_or(false);
  fields.finish();

  // vLLM's __post_init__ rules and messages.
  const std::string prefix = std::string(kInitType) + ": ";
  bool has_tcp = info.master_address || info.master_port;
  if (info.nccl_unique_id_b64 && has_tcp) {
    throw ValueError(prefix + "pass nccl_unique_id_b64 OR master_address/master_port, not both");
  }
  if (!info.nccl_unique_id_b64 && !(info.master_address && info.master_port)) {
    throw ValueError(
        prefix +
        "need nccl_unique_id_b64, or both master_address and master_port (got "
        "master_address=" +
        (info.master_address ? "'" + *info.master_address + "'" : "None") +
        ", master_port=" + (info.master_port ? std::to_string(*info.master_port) : "None") + ")");
  }
  if (info.nccl_unique_id_b64) {
    auto bytes = base64_decode(*info.nccl_unique_id_b64);
    if (!bytes) {
      throw ValueError(prefix +
                       "nccl_unique_id_b64 is not valid standard base64 (URL-safe base64 is not "
                       "accepted)");
    }
    if (bytes->size() != kNcclUniqueIdBytes) {
      throw ValueError(prefix + "nccl_unique_id_b64 must decode to 128 bytes, got " +
                       std::to_string(bytes->size()));
    }
    info.nccl_unique_id = std::move(*bytes);
  }
  // hotswap's own checks: values that would otherwise fail later, far from their cause.
  if (info.master_port && (*info.master_port < 1 || *info.master_port > 65535)) {
    throw ValueError(prefix + "`master_port` must be in 1..65535, got " +
                     std::to_string(*info.master_port));
  }
  if (info.master_address && info.master_address->empty()) {
    throw ValueError(prefix + "`master_address` must not be empty");
  }
  if (info.world_size < 1) {
    throw ValueError(prefix + "`world_size` must be at least 1, got " +
                     std::to_string(info.world_size));
  }
  if (info.rank_offset < 0 || info.rank_offset >= info.world_size) {
    throw ValueError(prefix + "`rank_offset` must be in 0.." + std::to_string(info.world_size - 1) +
                     " for world_size " + std::to_string(info.world_size) + ", got " +
                     std::to_string(info.rank_offset));
  }
  check_packing_geometry(kInitType, buffer_size, num_buffers);
  if (metadata) info.metadata = params_from_triples(kInitType, "metadata", *metadata);
  if (info.use_load_plan && (!info.metadata || info.metadata->empty())) {  // vLLM: not metadata
    throw ValueError(
        "NCCL weight transfer: use_load_plan needs the trainer's metadata in the "
        "init info");
  }
  if (buffer_size) info.packing.packed_buffer_size_bytes = *buffer_size;
  if (num_buffers) info.packing.packed_num_buffers = *num_buffers;
  return info;
}

nlohmann::json NcclInitInfo::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  if (master_address) out["master_address"] = *master_address;
  if (master_port) out["master_port"] = *master_port;
  out["rank_offset"] = rank_offset;
  out["world_size"] = world_size;
  if (nccl_unique_id_b64) out["nccl_unique_id_b64"] = *nccl_unique_id_b64;
  out["packed"] = packing.packed;
  out["packed_buffer_size_bytes"] = packing.packed_buffer_size_bytes;
  out["packed_num_buffers"] = packing.packed_num_buffers;
  // Only when set: a vLLM 0.33 worker refuses the key, and false is its behaviour anyway.
  if (use_load_plan) out["use_load_plan"] = true;
  if (metadata) out["metadata"] = params_to_triples(*metadata);
  return out;
}

PackingParams NcclUpdateInfo::packing(const PackingParams& handshake) const {
  PackingParams out = handshake;
  if (packed) out.packed = *packed;
  if (packed_buffer_size_bytes) out.packed_buffer_size_bytes = *packed_buffer_size_bytes;
  if (packed_num_buffers) out.packed_num_buffers = *packed_num_buffers;
  return out;
}

NcclUpdateInfo NcclUpdateInfo::from_json(const nlohmann::json& object) {
  JsonFields fields(object, kUpdateType,
                    {"names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes",
                     "packed_num_buffers", "is_checkpoint_format", "src"});
  // vLLM 0.33 defaults each list to empty: all three empty means "the previous round's
  // metadata" (the trainer sends that when nothing changed; the engine keeps the last lists).
  std::vector<std::string> names, dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  if (fields.has("names")) names = fields.required_string_list("names");
  if (fields.has("dtype_names")) dtype_names = fields.required_string_list("dtype_names");
  if (fields.has("shapes")) shapes = fields.required_shape_list("shapes");
  NcclUpdateInfo info;
  info.packed = fields.optional_bool("packed");
  info.packed_buffer_size_bytes = fields.optional_int("packed_buffer_size_bytes");
  info.packed_num_buffers = fields.optional_int("packed_num_buffers");
  (void)fields.optional_bool("is_checkpoint_format");  // E1: accepted, checked, ignored
  info.src = fields.optional_int("src").value_or(0);
  fields.finish();
  info.params = params_from_lists(kUpdateType, names, dtype_names, shapes);
  check_packing_geometry(kUpdateType, info.packed_buffer_size_bytes, info.packed_num_buffers);
  return info;
}

nlohmann::json NcclUpdateInfo::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  write_param_lists(params, out);
  if (src != 0) out["src"] = src;  // vLLM's trainer drops a src of 0: 0.33's payload
  if (packed) out["packed"] = *packed;
  if (packed_buffer_size_bytes) out["packed_buffer_size_bytes"] = *packed_buffer_size_bytes;
  if (packed_num_buffers) out["packed_num_buffers"] = *packed_num_buffers;
  return out;
}

void check_update_src(std::int64_t src, std::int64_t rank_offset) {
  if (src < 0 || src >= rank_offset) {
    throw ValueError("NCCL update src must be a sender rank in [0, " + std::to_string(rank_offset) +
                     "), got " + std::to_string(src) + ".");
  }
}

void check_against_load_plan(const std::vector<ParamMeta>& manifest,
                             const std::vector<ParamMeta>& update) {
  // vLLM's words: a dtype as torch prints it, a shape as a Python list.
  auto described = [](const ParamMeta& m) {
    return "(torch." + std::string(dtype_name(m.dtype)) + ", " + shape_to_string(m.shape) + ")";
  };
  // By name: a model's manifest has thousands of entries, and every update is checked.
  std::unordered_map<std::string_view, const ParamMeta*> declared;
  declared.reserve(manifest.size());
  for (const auto& m : manifest)
    declared.emplace(m.name, &m);
  for (const auto& p : update) {
    auto it = declared.find(p.name);
    if (it != declared.end() && it->second->dtype == p.dtype && it->second->shape == p.shape) {
      continue;
    }
    const std::string problem = it == declared.end()
                                    ? "was not declared in the metadata sent at init"
                                    : "was declared at init as " + described(*it->second);
    throw ValueError("NCCL weight transfer: '" + p.name + "' sent as " + described(p) + " " +
                     problem + "; with use_load_plan, re-init the engine to re-plan");
  }
}

}  // namespace hotswap::protocol
