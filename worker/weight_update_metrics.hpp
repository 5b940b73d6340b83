// The weight-update half of the worker's /metrics, in Prometheus text: vLLM 0.34's
// rl_weight_update series, hotswap's counters of outcomes and received bytes, and the weight
// version served. (The serving half is serving/serving_metrics.)
#pragma once

#include <string>

#include "worker/worker_service.hpp"

namespace hotswap::worker {

std::string render_weight_update_metrics(const WorkerService& service);

}  // namespace hotswap::worker
