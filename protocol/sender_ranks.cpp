#include "protocol/sender_ranks.hpp"

#include <algorithm>
#include <string>

#include "protocol/errors.hpp"
#include "protocol/json_fields.hpp"

namespace hotswap::protocol {

std::vector<std::int64_t> read_sender_ranks(JsonFields& fields, std::size_t num_names) {
  auto ranks = fields.optional_int_list(kSenderRanksField);
  if (!ranks || ranks->empty()) return {};
  const std::string prefix = fields.type_name() + ": ";
  if (ranks->size() != num_names) {
    throw ValueError(prefix + "`sender_ranks` should be of the same size as `names`: got " +
                     std::to_string(ranks->size()) + " and " + std::to_string(num_names));
  }
  for (std::size_t i = 0; i < ranks->size(); ++i) {
    if ((*ranks)[i] < 0) {
      throw ValueError(prefix + "`sender_ranks[" + std::to_string(i) +
                       "]` must be a trainer rank (0 or more), got " + std::to_string((*ranks)[i]));
    }
  }
  return std::move(*ranks);
}

void write_sender_ranks(const std::vector<std::int64_t>& sender_ranks, nlohmann::json& object) {
  const bool all_rank_zero = std::all_of(sender_ranks.begin(), sender_ranks.end(),
                                         [](std::int64_t rank) { return rank == 0; });
  if (!all_rank_zero) object[std::string(kSenderRanksField)] = sender_ranks;
}

void check_sender_ranks(const std::vector<std::int64_t>& sender_ranks, std::int64_t rank_offset) {
  for (std::size_t i = 0; i < sender_ranks.size(); ++i) {
    if (sender_ranks[i] >= rank_offset) {
      throw ValueError("`sender_ranks[" + std::to_string(i) + "]` is " +
                       std::to_string(sender_ranks[i]) + ", but the trainer ranks of this group " +
                       "are 0.." + std::to_string(rank_offset - 1) + " (rank_offset " +
                       std::to_string(rank_offset) + "); a worker rank never sends");
    }
  }
}

}  // namespace hotswap::protocol
