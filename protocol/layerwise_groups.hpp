// layerwise_groups: the partition of flat parameter names into one group per decoder layer,
// with exactly the semantics of vLLM's `base.layerwise_groups`. Group index g names the same
// group on every trainer rank and every consumer, because it derives from metadata order.
//
// - A name's stack key is its OUTERMOST integer segment: `model.layers.3.mlp.experts.7.w1`
//   keys on (`model.layers`, 3), which keeps a MoE layer whole.
// - Names without an index split by position: before the first indexed name they form the
//   pre block (embeddings), after it the post block (final norm, lm_head, projectors). The post
//   block lands last however early it arrived (a pipeline-parallel source may stream it first).
// - Stacks come out in first-appearance order of their prefix, ascending index within it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hotswap::protocol {

// (prefix, index) of the outermost all-digit dot segment, or nullopt when there is none.
std::optional<std::pair<std::string, std::uint64_t>> stack_key(std::string_view name);

std::vector<std::vector<std::string>> layerwise_groups(const std::vector<std::string>& names);

}  // namespace hotswap::protocol
