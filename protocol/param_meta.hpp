// ParamMeta: name, wire dtype and full (Hugging Face) shape of one parameter, as in vLLM's
// `ParamMeta`. Both sides size everything from it: receive buffers, chunk boundaries, offsets.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "protocol/dtype.hpp"

namespace hotswap::protocol {

struct ParamMeta {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<std::int64_t> shape;  // [] is a scalar: one element

  // Elements; a ValueError naming the parameter on a negative dimension or overflow.
  std::uint64_t numel() const;
  // Bytes on the wire: numel × item size, checked for overflow the same way.
  std::uint64_t nbytes() const;

  bool operator==(const ParamMeta&) const = default;
};

// Zips vLLM's three parallel lists (`names`, `dtype_names`, `shapes`) into ParamMeta, with
// vLLM's length checks and messages, and resolves every dtype name up front so that nothing
// unknown is discovered after the first byte has moved. `type_name` prefixes messages.
std::vector<ParamMeta> params_from_lists(std::string_view type_name,
                                         const std::vector<std::string>& names,
                                         const std::vector<std::string>& dtype_names,
                                         const std::vector<std::vector<std::int64_t>>& shapes);

// Writes `names`, `dtype_names` and `shapes` for `params` into `object`.
void write_param_lists(const std::vector<ParamMeta>& params, nlohmann::json& object);

// "name (bfloat16 [2, 3])".
std::ostream& operator<<(std::ostream& out, const ParamMeta& meta);

// "[2, 3]": how shapes are printed in messages.
std::string shape_to_string(const std::vector<std::int64_t>& shape);

}  // namespace hotswap::protocol
