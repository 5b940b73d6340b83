#include "protocol/param_meta.hpp"

#include <algorithm>
#include <map>
#include <ostream>
#include <set>

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

namespace {

std::string ranks_tuple(const std::vector<std::int64_t>& ranks) {
  // As Python prints a tuple: (1,) for one element.
  std::string out = "(";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + (ranks.size() == 1 ? ",)" : ")");
}

std::string ranks_list(const std::vector<std::int64_t>& ranks) {
  std::string out = "[";
  for (std::size_t i = 0; i < ranks.size(); ++i)
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out + "]";
}

}  // namespace

void check_ownership(ParamMeta& meta) {
  const std::string who = "parameter '" + meta.name + "'";
  if (!meta.owners) {
    if (!meta.mesh_shape.empty() || !meta.placements.empty()) {
      throw ValueError(who + " declares a mesh or placements without owners");
    }
    return;
  }
  const auto& owners = *meta.owners;
  std::vector<std::int64_t> sorted = owners;
  std::sort(sorted.begin(), sorted.end());
  if (owners.empty() || sorted.front() < 0 ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw ValueError(who + " owners must be distinct non-negative ranks, got " +
                     ranks_tuple(owners));
  }
  if (meta.mesh_shape.empty()) meta.mesh_shape = {static_cast<std::int64_t>(owners.size())};
  std::int64_t cells = 1;
  bool positive = true;
  for (auto d : meta.mesh_shape) {
    positive = positive && d > 0;
    cells *= d;
  }
  if (!positive || cells != static_cast<std::int64_t>(owners.size())) {
    throw ValueError(who + " mesh_shape " + ranks_tuple(meta.mesh_shape) + " does not cover its " +
                     std::to_string(owners.size()) + " owners");
  }
  if (meta.placements.empty()) return;
  if (meta.placements.size() != meta.mesh_shape.size()) {
    throw ValueError(who + " has " + std::to_string(meta.placements.size()) + " placements for a " +
                     std::to_string(meta.mesh_shape.size()) + "-D mesh");
  }
  bool all_replicated = true;
  for (const auto& p : meta.placements) {
    if (p.kind != Placement::Kind::kShard) continue;
    all_replicated = false;
    if (p.dim < 0 || p.dim >= static_cast<std::int64_t>(meta.shape.size())) {
      throw ValueError(who + " shards dim " + std::to_string(p.dim) + " of a " +
                       std::to_string(meta.shape.size()) + "-D tensor");
    }
  }
  if (all_replicated) meta.placements.clear();
}

BroadcasterPlan plan_broadcasters(const std::vector<ParamMeta>& metadata) {
  BroadcasterPlan plan;
  std::vector<std::int64_t> first_owner(metadata.size());
  std::set<std::int64_t> broadcasters;
  for (std::size_t i = 0; i < metadata.size(); ++i) {
    const auto& m = metadata[i];
    first_owner[i] = m.owners ? m.owners->front() : 0;
    broadcasters.insert(first_owner[i]);
    if (m.owners && std::find(m.owners->begin() + 1, m.owners->end(), 0) != m.owners->end()) {
      throw ValueError("parameter '" + m.name + "' has owners " + ranks_tuple(*m.owners) +
                       ": rank 0 only gathers in its own turn, so it must be the first owner of "
                       "every parameter it owns.");
    }
  }
  if (broadcasters.size() > 1) {
    const std::vector<std::int64_t> listed(broadcasters.begin(), broadcasters.end());
    std::map<std::int64_t, std::int64_t> broadcaster_of;
    // In broadcaster order, then metadata order, as vLLM walks them: the same parameter is named.
    for (auto b : listed) {
      for (std::size_t i = 0; i < metadata.size(); ++i) {
        if (first_owner[i] != b) continue;
        const auto& m = metadata[i];
        if (!m.owners) {
          throw ValueError("parameter '" + m.name +
                           "' has no owners, so every rank owns it, but the source has several "
                           "broadcasting ranks " +
                           ranks_list(listed) + ". Every parameter must declare its owners.");
        }
        for (auto r : *m.owners) {
          auto [it, added] = broadcaster_of.emplace(r, b);
          if (!added && it->second != b) {
            throw ValueError("rank " + std::to_string(r) + " owns parameters broadcast by ranks " +
                             std::to_string(it->second) + " and " + std::to_string(b) +
                             ", but each broadcaster sends in its own turn, so every parameter a "
                             "rank owns must share its first owner.");
          }
        }
      }
    }
  }
  broadcasters.insert(0);
  plan.group_ranks.assign(broadcasters.begin(), broadcasters.end());
  plan.src.reserve(metadata.size());
  for (auto owner : first_owner) {
    plan.src.push_back(std::lower_bound(plan.group_ranks.begin(), plan.group_ranks.end(), owner) -
                       plan.group_ranks.begin());
  }
  return plan;
}

std::vector<ParamMeta> params_from_triples(std::string_view type_name, std::string_view where,
                                           const nlohmann::json& triples) {
  const std::string prefix = std::string(type_name) + ": `" + std::string(where) + "`";
  if (!triples.is_array()) {
    throw ValueError(prefix + " must be a list of [name, dtype_name, shape], got " +
                     std::string(triples.type_name()));
  }
  std::vector<std::string> names, dtype_names;
  std::vector<std::vector<std::int64_t>> shapes;
  for (std::size_t i = 0; i < triples.size(); ++i) {
    const auto& t = triples[i];
    const bool well_formed =
        t.is_array() && t.size() == 3 && t[0].is_string() && t[1].is_string() && t[2].is_array();
    std::vector<std::int64_t> shape;
    bool dims_ok = well_formed;
    if (well_formed) {
      for (const auto& d : t[2]) {
        if (!d.is_number_integer() || d.get<std::int64_t>() < 0) {
          dims_ok = false;
          break;
        }
        shape.push_back(d.get<std::int64_t>());
      }
    }
    if (!dims_ok) {
      throw ValueError(prefix + "[" + std::to_string(i) +
                       "] must be [name, dtype_name, shape] with a shape of non-negative "
                       "integers, got " +
                       t.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    }
    names.push_back(t[0].get<std::string>());
    dtype_names.push_back(t[1].get<std::string>());
    shapes.push_back(std::move(shape));
  }
  return params_from_lists(type_name, names, dtype_names, shapes);
}

nlohmann::json params_to_triples(const std::vector<ParamMeta>& params) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : params)
    out.push_back({p.name, dtype_name(p.dtype), p.shape});
  return out;
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
