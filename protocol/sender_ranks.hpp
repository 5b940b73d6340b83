// `sender_ranks`: hotswap's extension to the broadcast backends' update_info (`nccl`, `gloo`,
// `sparse_nccl`, `sparse_gloo`), for trainers whose ranks each hold part of the model (expert or
// pipeline parallelism). Parallel to `names`, it says which trainer rank broadcasts each
// parameter; the trainer ranks are the group's first `rank_offset` ranks. Absent (or empty, as
// vLLM's trainers send it) every parameter comes from rank 0, so vLLM's trainers work unchanged.
//
// Packed rounds cut chunks by vLLM's rule within each run of parameters that share a sender
// (protocol/chunk_plan.hpp), so one sender means exactly vLLM's chunks.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace hotswap::protocol {

class JsonFields;

inline constexpr std::string_view kSenderRanksField = "sender_ranks";

// Reads `sender_ranks` when present: one non-negative integer per name (ValueError naming the
// field otherwise). Empty when absent or null.
std::vector<std::int64_t> read_sender_ranks(JsonFields& fields, std::size_t num_names);

// Writes `sender_ranks` when there is more than rank 0 to say.
void write_sender_ranks(const std::vector<std::int64_t>& sender_ranks, nlohmann::json& object);

// At receive time, once the group is known: every sender must be a trainer rank, 0 ..
// rank_offset - 1. ValueError naming the first that is not, before any collective.
void check_sender_ranks(const std::vector<std::int64_t>& sender_ranks, std::int64_t rank_offset);

// The rank that broadcasts parameter `index`.
inline std::int64_t sender_of(const std::vector<std::int64_t>& sender_ranks, std::size_t index) {
  return sender_ranks.empty() ? 0 : sender_ranks[index];
}

}  // namespace hotswap::protocol
