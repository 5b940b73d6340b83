#include "trainer_sdk/shard_plan.hpp"

#include <algorithm>
#include <charconv>

#include "protocol/errors.hpp"
#include "protocol/layerwise_groups.hpp"

namespace hotswap::trainer_sdk {
namespace {

// E of `….experts.E.…`, or nullopt for a tensor that belongs to no single expert.
std::optional<std::uint64_t> expert_index(std::string_view name) {
  constexpr std::string_view kMarker = ".experts.";
  const auto at = name.find(kMarker);
  if (at == std::string_view::npos) return std::nullopt;
  const char* begin = name.data() + at + kMarker.size();
  const char* end = name.data() + name.size();
  std::uint64_t index = 0;
  auto [stop, error] = std::from_chars(begin, end, index);
  if (error != std::errc() || stop == end || *stop != '.') return std::nullopt;
  return index;
}

// Which of `ranks` blocks of `count` items item `index` falls in: blocks differ by at most one.
int block_of(std::uint64_t index, std::uint64_t count, int ranks) {
  return static_cast<int>(index * static_cast<std::uint64_t>(ranks) / count);
}

}  // namespace

std::optional<ShardBy> shard_by_from_name(std::string_view name) {
  if (name == "experts") return ShardBy::kExperts;
  if (name == "layers") return ShardBy::kLayers;
  return std::nullopt;
}

std::unordered_set<std::string> held_by_rank(const std::vector<std::string>& names, ShardBy by,
                                             int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    throw protocol::ValueError("rank " + std::to_string(rank) + " is outside " +
                               std::to_string(ranks) + " ranks");
  }
  std::unordered_set<std::string> held;
  if (by == ShardBy::kExperts) {
    std::uint64_t experts = 0;
    for (const auto& name : names) {
      if (auto e = expert_index(name)) experts = std::max(experts, *e + 1);
    }
    if (experts == 0) {
      throw protocol::ValueError(
          "sharding by experts, but no tensor belongs to an expert (a name with "
          "'.experts.<index>.'): this is a dense model; shard it by layers");
    }
    for (const auto& name : names) {
      auto e = expert_index(name);
      if (!e || block_of(*e, experts, ranks) == rank) held.insert(name);
    }
    return held;
  }
  std::uint64_t layers = 0;
  for (const auto& name : names) {
    if (auto key = protocol::stack_key(name)) layers = std::max(layers, key->second + 1);
  }
  if (layers == 0) {
    throw protocol::ValueError("sharding by layers, but no tensor has a layer index");
  }
  for (const auto& name : names) {
    auto key = protocol::stack_key(name);
    // By name, not position: a checkpoint's order is often alphabetical (lm_head first).
    const bool embedding = name.find("embed") != std::string::npos;
    const int owner = key ? block_of(key->second, layers, ranks) : embedding ? 0 : ranks - 1;
    if (owner == rank) held.insert(name);
  }
  return held;
}

}  // namespace hotswap::trainer_sdk
