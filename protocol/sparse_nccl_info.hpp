// The `sparse_nccl` backend's payloads (vLLM's SparseNCCLWeightTransferUpdateInfo). init_info
// is the nccl one (the trainer ships unpacked defaults: sparse is never packed). On the wire,
// per parameter in order: a broadcast of `n` int32 flat (row-major) indices into the full
// checkpoint-shaped tensor, then a broadcast of `n` values of the parameter's dtype.
// `sparse_gloo` speaks the same protocol over gloo. Every patch comes from group rank 0; the init
// info's `use_load_plan` is refused (vLLM 0.34: a dense-only mode).
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/nccl_info.hpp"
#include "protocol/param_meta.hpp"

namespace hotswap::protocol {

struct SparseNcclUpdateInfo {
  std::vector<ParamMeta> params;  // dtype of the values, full checkpoint shape
  std::vector<std::int64_t> num_updates_list;

  static SparseNcclUpdateInfo from_json(const nlohmann::json& object);
  nlohmann::json to_json() const;
};

using SparseNcclInitInfo = NcclInitInfo;
using SparseGlooInitInfo = NcclInitInfo;
using SparseGlooUpdateInfo = SparseNcclUpdateInfo;

}  // namespace hotswap::protocol
