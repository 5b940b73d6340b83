#include "trainer_sdk/rank_holdings.hpp"

#include <sstream>
#include <unordered_map>

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::trainer_sdk {
namespace {

constexpr const char* kType = "RankHoldings";
constexpr const char* kWhole =
    "metadata() must describe the WHOLE model on every rank, since the wire lists and every "
    "rank's checks are built from one rank's metadata";

std::string describe(const protocol::ParamMeta& meta) {
  std::ostringstream out;
  out << "'" << meta.name << "' " << protocol::dtype_name(meta.dtype) << " "
      << protocol::shape_to_string(meta.shape);
  return out.str();
}

// The first difference between rank 0's metadata and rank `rank`'s, or "" when they agree.
std::string difference(const std::vector<protocol::ParamMeta>& first,
                       const std::vector<protocol::ParamMeta>& other, std::size_t rank) {
  const std::string who = "rank " + std::to_string(rank);
  for (std::size_t i = 0; i < first.size() && i < other.size(); ++i) {
    if (first[i] == other[i]) continue;
    return who + " disagrees with rank 0 at index " + std::to_string(i) + ": rank 0 declares " +
           describe(first[i]) + ", " + who + " declares " + describe(other[i]);
  }
  if (first.size() != other.size()) {
    return who + " declares " + std::to_string(other.size()) + " parameters and rank 0 declares " +
           std::to_string(first.size()) + "; a rank that reported only its own share would leave " +
           "the rest of the model silently un-transferred";
  }
  return "";
}

}  // namespace

nlohmann::json RankHoldings::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  protocol::write_param_lists(metadata, out);
  out["held"] = held ? nlohmann::json(*held) : nlohmann::json(nullptr);
  return out;
}

RankHoldings RankHoldings::from_json(const nlohmann::json& object) {
  protocol::JsonFields fields(object, kType, {"names", "dtype_names", "shapes", "held"});
  auto names = fields.required_string_list("names");
  auto dtype_names = fields.required_string_list("dtype_names");
  auto shapes = fields.required_shape_list("shapes");
  auto held = fields.optional_value("held");
  fields.finish();
  RankHoldings out;
  out.metadata = protocol::params_from_lists(kType, names, dtype_names, shapes);
  if (held && !held->is_null()) {
    if (!held->is_array()) fields.type_error("held", "a list of names or null", *held);
    out.held.emplace();
    for (const auto& name : *held) {
      if (!name.is_string()) fields.type_error("held", "a list of names or null", *held);
      out.held->push_back(name.get<std::string>());
    }
  }
  return out;
}

std::vector<std::int64_t> assign_senders(std::span<const RankHoldings> ranks) {
  if (ranks.empty()) throw protocol::ValueError("assign_senders needs at least rank 0's holdings");
  const auto& metadata = ranks[0].metadata;
  for (std::size_t r = 1; r < ranks.size(); ++r) {
    auto diff = difference(metadata, ranks[r].metadata, r);
    if (!diff.empty()) throw protocol::ValueError(std::string(kWhole) + ", but " + diff + ".");
  }
  std::unordered_map<std::string_view, std::size_t> index;
  index.reserve(metadata.size());
  for (std::size_t i = 0; i < metadata.size(); ++i)
    index.emplace(metadata[i].name, i);

  constexpr std::int64_t kNobody = -1;
  std::vector<std::int64_t> senders(metadata.size(), kNobody);
  // Highest rank first, so that the lowest rank that holds a name is the one left standing.
  for (std::size_t r = ranks.size(); r-- > 0;) {
    if (!ranks[r].held) {
      std::fill(senders.begin(), senders.end(), static_cast<std::int64_t>(r));
      continue;
    }
    for (const auto& name : *ranks[r].held) {
      auto it = index.find(name);
      if (it == index.end()) {
        throw protocol::ValueError("rank " + std::to_string(r) + "'s held_names() include '" +
                                   name + "', which metadata() does not declare");
      }
      senders[it->second] = static_cast<std::int64_t>(r);
    }
  }
  std::size_t orphans = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < senders.size(); ++i) {
    if (senders[i] != kNobody) continue;
    if (orphans++ == 0) first = i;
  }
  if (orphans > 0) {
    throw protocol::ValueError(
        "'" + metadata[first].name + "' is held by no trainer rank (held_names() of ranks 0.." +
        std::to_string(ranks.size() - 1) + "): every name must be held by at least one rank, or " +
        "it can never be served" +
        (orphans > 1 ? " (" + std::to_string(orphans) + " names are orphaned)" : std::string()));
  }
  return senders;
}

}  // namespace hotswap::trainer_sdk
