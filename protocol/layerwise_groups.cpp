#include "protocol/layerwise_groups.hpp"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace hotswap::protocol {
namespace {

// Python's str.isdigit() on ASCII names: non-empty and every character a digit.
bool is_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::optional<std::pair<std::string, std::uint64_t>> stack_key(std::string_view name) {
  std::size_t begin = 0;
  while (begin <= name.size()) {
    std::size_t end = name.find('.', begin);
    if (end == std::string_view::npos) end = name.size();
    std::string_view part = name.substr(begin, end - begin);
    // Indices beyond 19 digits do not occur in real models; treat them as plain text.
    if (is_digits(part) && part.size() <= 19) {
      std::string prefix(begin == 0 ? std::string_view{} : name.substr(0, begin - 1));
      return std::make_pair(std::move(prefix), std::stoull(std::string(part)));
    }
    begin = end + 1;
  }
  return std::nullopt;
}

std::vector<std::vector<std::string>> layerwise_groups(const std::vector<std::string>& names) {
  using Key = std::pair<std::string, std::uint64_t>;
  std::vector<std::string> pre;
  std::vector<std::string> post;
  std::map<Key, std::vector<std::string>> stacks;
  std::vector<Key> order;  // first appearance of each key
  for (const auto& name : names) {
    auto key = stack_key(name);
    if (!key) {
      (order.empty() ? pre : post).push_back(name);
      continue;
    }
    auto [it, inserted] = stacks.try_emplace(*key);
    if (inserted) order.push_back(*key);
    it->second.push_back(name);
  }

  std::unordered_map<std::string, std::size_t> prefix_rank;
  for (const auto& key : order)
    prefix_rank.try_emplace(key.first, prefix_rank.size());
  std::stable_sort(order.begin(), order.end(), [&](const Key& a, const Key& b) {
    auto ra = prefix_rank.at(a.first);
    auto rb = prefix_rank.at(b.first);
    return ra != rb ? ra < rb : a.second < b.second;
  });

  std::vector<std::vector<std::string>> groups;
  groups.reserve(order.size() + 2);
  if (!pre.empty()) groups.push_back(std::move(pre));
  for (const auto& key : order)
    groups.push_back(std::move(stacks.at(key)));
  if (!post.empty()) groups.push_back(std::move(post));
  return groups;
}

}  // namespace hotswap::protocol
