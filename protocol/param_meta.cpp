#include "protocol/param_meta.hpp"

#include <ostream>

#include "protocol/errors.hpp"

namespace hotswap::protocol {

std::uint64_t ParamMeta::numel() const {
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) {
      throw ValueError("'" + name + "' has a negative dimension in shape " +
                       shape_to_string(shape));
    }
    if (__builtin_mul_overflow(n, static_cast<std::uint64_t>(d), &n)) {
      throw ValueError("'" + name + "' has a shape " + shape_to_string(shape) +
                       " whose element count overflows 64 bits");
    }
  }
  return n;
}

std::uint64_t ParamMeta::nbytes() const {
  std::uint64_t bytes = 0;
  if (__builtin_mul_overflow(numel(), static_cast<std::uint64_t>(item_size(dtype)), &bytes)) {
    throw ValueError("'" + name + "' has a shape " + shape_to_string(shape) +
                     " whose byte size overflows 64 bits");
  }
  return bytes;
}

std::vector<ParamMeta> params_from_lists(std::string_view type_name,
                                         const std::vector<std::string>& names,
                                         const std::vector<std::string>& dtype_names,
                                         const std::vector<std::vector<std::int64_t>>& shapes) {
  auto length_error = [&](std::string_view field, std::size_t got) {
    return ValueError(std::string(type_name) + ": `" + std::string(field) +
                      "` should be of the same size as `names`: got " + std::to_string(got) +
                      " and " + std::to_string(names.size()));
  };
  if (dtype_names.size() != names.size()) throw length_error("dtype_names", dtype_names.size());
  if (shapes.size() != names.size()) throw length_error("shapes", shapes.size());

  std::vector<ParamMeta> params;
  params.reserve(names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    ParamMeta meta;
    meta.name = names[i];
    try {
      meta.dtype = dtype_from_name(dtype_names[i]);
    } catch (const ValueError&) {
      throw ValueError(std::string(type_name) + ": '" + names[i] + "' has unknown dtype name '" +
                       dtype_names[i] + "'");
    }
    meta.shape = shapes[i];
    (void)meta.nbytes();  // rejects negative dimensions and sizes that overflow
    params.push_back(std::move(meta));
  }
  return params;
}

void write_param_lists(const std::vector<ParamMeta>& params, nlohmann::json& object) {
  auto names = nlohmann::json::array();
  auto dtype_names = nlohmann::json::array();
  auto shapes = nlohmann::json::array();
  for (const auto& p : params) {
    names.push_back(p.name);
    dtype_names.push_back(dtype_name(p.dtype));
    shapes.push_back(p.shape);
  }
  object["names"] = std::move(names);
  object["dtype_names"] = std::move(dtype_names);
  object["shapes"] = std::move(shapes);
}

std::ostream& operator<<(std::ostream& out, const ParamMeta& meta) {
  return out << meta.name << " (" << meta.dtype << " " << shape_to_string(meta.shape) << ")";
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

}  // namespace hotswap::protocol
