// CheckedStream: one pass of a trainer's source, checked element by element against the
// metadata the workers were sent, for every engine that streams a source (broadcast, ipc, shm).
// RankShare: the part of such a pass that one trainer rank visits and sends when several ranks
// send (trainer_sdk/rank_holdings.hpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "protocol/param_meta.hpp"
#include "trainer_sdk/weight_source.hpp"

namespace hotswap::trainer_sdk {

// Which parameters of the metadata one trainer rank's pass visits (the names of its groups(),
// in order) and which of them it sends. The sole sender of a round visits and sends them all.
struct RankShare {
  int rank = 0;
  std::vector<bool> visits;
  std::vector<bool> sends;  // a subset of visits

  // `senders` from assign_senders; `groups` this rank's WeightSource::groups().
  static RankShare of(int rank, const std::vector<protocol::ParamMeta>& meta,
                      const std::vector<std::int64_t>& senders,
                      const std::vector<std::vector<std::string>>& groups);
};

// One pass of a source checked, element by element, against the metadata the worker was sent
// (vLLM's `_checked_iter`): a disagreement would make the two sides cut the stream differently,
// so it is a ValueError naming the first divergent parameter, before it is sent.
//
// With a RankShare, the pass is one rank's of many senders: it yields only the names the share
// visits, and the stream is advanced exactly when the round reaches each of them, never ahead,
// since materializing a name may be a collective among the ranks that hold it.
class CheckedStream {
 public:
  CheckedStream(std::unique_ptr<WeightStream> stream, const std::vector<protocol::ParamMeta>& meta,
                c10::Device device = c10::Device(c10::kCPU),
                std::optional<RankShare> share = std::nullopt)
      : stream_(std::move(stream)), meta_(meta), device_(device), share_(std::move(share)) {}
  // The sole sender: the next tensor, contiguous, on the stream's device.
  at::Tensor next();
  // Parameter `index` (asked in increasing order, each once): its tensor, contiguous on the
  // stream's device, when this rank sends it; undefined otherwise. With a share, the names it
  // visits before `index` that were not asked for (another broadcaster's turn) are read and
  // dropped first, as finish() drops those after the last one asked.
  at::Tensor take(std::size_t index);
  // After the last tensor: the source must have ended too.
  void finish();
  // How many tensors next() has returned: the metadata index of the next one.
  std::size_t position() const { return sent_; }

 private:
  // With a share: reads parameter `index` from the pass (if this rank visits it), checked.
  at::Tensor read_share(std::size_t index);

  std::unique_ptr<WeightStream> stream_;
  const std::vector<protocol::ParamMeta>& meta_;
  c10::Device device_;
  std::optional<RankShare> share_;
  std::size_t sent_ = 0;
  std::size_t cursor_ = 0;  // with a share: the next metadata index the pass has not read
};

}  // namespace hotswap::trainer_sdk
