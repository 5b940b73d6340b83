// ParamMeta: name, wire dtype and full (Hugging Face) shape of one parameter, as in vLLM's
// `ParamMeta`. Both sides size everything from it: receive buffers, chunk boundaries, offsets.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/dtype.hpp"

namespace hotswap::protocol {

// How a parameter lies over one dimension of its owners' mesh (vLLM 0.34's `Replicate()` and
// `Shard(dim)`, after torch's DTensor placements).
struct Placement {
  enum class Kind { kReplicate, kShard };
  Kind kind = Kind::kReplicate;
  std::int64_t dim = 0;  // kShard: the tensor dimension split over that mesh dimension

  static Placement replicate() { return {}; }
  static Placement shard(std::int64_t dim) { return {Kind::kShard, dim}; }
  bool operator==(const Placement&) const = default;
};

struct ParamMeta {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;  // [] is a scalar: one element
  // Trainer side only, never on the wire (vLLM 0.34): the global trainer ranks that hold the
  // parameter, distinct and non-negative; owners[0] broadcasts it (protocol/broadcaster_plan).
  // Unset: rank 0 alone. `mesh_shape` is the row-major mesh over the owners (default
  // {owners.size()}), `placements` one per mesh dimension (empty: replicated on all).
  std::optional<std::vector<std::int64_t>> owners = std::nullopt;
  std::vector<std::int64_t> mesh_shape = {};
  std::vector<Placement> placements = {};

  // Elements; a ValueError naming the parameter on a negative dimension or overflow.
  std::uint64_t numel() const;
  // Bytes on the wire: numel × item size, checked for overflow the same way.
  std::uint64_t nbytes() const;

  bool operator==(const ParamMeta&) const = default;
};

// vLLM 0.34's ParamMeta.__post_init__ checks of `owners`, `mesh_shape` and `placements`, with
// its messages; fills the default mesh ({owners.size()}) and drops all-Replicate placements.
void check_ownership(ParamMeta& meta);

// vLLM 0.34's broadcaster plan: every parameter is broadcast by its first owner (rank 0 when it
// has none). `group_ranks` are the trainer ranks that join the transfer group, sorted (rank 0
// always, as it drives the calls); `src[i]` is parameter i's broadcaster as an index into them.
// Raises vLLM's ownership errors (rank 0 owning a parameter after another rank; a parameter
// without owners beside several broadcasters; a rank owning parameters of two broadcasters),
// identically on every rank, before any collective.
struct BroadcasterPlan {
  std::vector<std::int64_t> group_ranks;
  std::vector<std::int64_t> src;
};
BroadcasterPlan plan_broadcasters(const std::vector<ParamMeta>& metadata);

// Zips vLLM's three parallel lists (`names`, `dtype_names`, `shapes`) into ParamMeta, with
// vLLM's length checks and messages, and resolves every dtype name up front so that nothing
// unknown is discovered after the first byte has moved. `type_name` prefixes messages.
std::vector<ParamMeta> params_from_lists(std::string_view type_name,
                                         const std::vector<std::string>& names,
                                         const std::vector<std::string>& dtype_names,
                                         const std::vector<std::vector<std::int64_t>>& shapes);

// vLLM 0.34's init `metadata`: a list of `[name, dtype_name, shape]` triples, checked as the
// three lists are. `where` names the field in messages.
std::vector<ParamMeta> params_from_triples(std::string_view type_name, std::string_view where,
                                           const nlohmann::json& triples);
// The inverse: `[[name, dtype_name, shape], ...]`.
nlohmann::json params_to_triples(const std::vector<ParamMeta>& params);

// Writes `names`, `dtype_names` and `shapes` for `params` into `object`.
void write_param_lists(const std::vector<ParamMeta>& params, nlohmann::json& object);

// "name (bfloat16 [2, 3])".
std::ostream& operator<<(std::ostream& out, const ParamMeta& meta);

// "[2, 3]": how shapes are printed in messages.
std::string shape_to_string(const std::vector<std::int64_t>& shape);

}  // namespace hotswap::protocol
