// The weight-update half of the worker's /metrics, in Prometheus text: vLLM 0.34's
// rl_weight_update series, hotswap's counters of outcomes and received bytes, and the weight
// version served. (The serving half is serving/serving_metrics.)
#pragma once

#include <optional>
#include <string>

#include "worker/weight_session.hpp"

namespace hotswap::worker {

// `version`: the weight version served now.
std::string render_weight_update_metrics(const WeightSession& session,
                                         const std::optional<std::string>& version);

}  // namespace hotswap::worker
