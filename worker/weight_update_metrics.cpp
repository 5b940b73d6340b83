#include "worker/weight_update_metrics.hpp"

#include <sstream>
#include <type_traits>

#include "worker/serving/serving_metrics.hpp"

namespace hotswap::worker {

std::string render_weight_update_metrics(const WeightSession& session,
                                         const std::optional<std::string>& version) {
  std::ostringstream out;
  auto stats = session.operation_stats();
  auto label = [](const std::string& key, const std::string& value) {
    return key + "=\"" + escape_label_value(value) + "\"";
  };
  // One sample a line: `name{labels} value`.
  auto sample = [&](const std::string& name, const std::string& labels, auto value) {
    out << name;
    if (!labels.empty()) out << '{' << labels << '}';
    if constexpr (std::is_floating_point_v<decltype(value)>) {
      out << ' ' << prometheus_number(value) << '\n';
    } else {
      out << ' ' << value << '\n';
    }
  };
  // vLLM 0.34's two series; its counter of outcomes went, and lives on under hotswap's name.
  out << "# HELP vllm:rl_weight_update_operations_in_flight Weight-transfer operations currently "
         "awaited.\n"
         "# TYPE vllm:rl_weight_update_operations_in_flight gauge\n";
  for (const auto& [op, s] : stats)
    sample("vllm:rl_weight_update_operations_in_flight", label("operation", op), s.in_flight);
  out << "# HELP vllm:rl_weight_update_operation_duration_seconds Duration of one weight-transfer "
         "operation.\n"
         "# TYPE vllm:rl_weight_update_operation_duration_seconds histogram\n";
  for (const auto& [op, s] : stats) {
    const std::string name = "vllm:rl_weight_update_operation_duration_seconds";
    std::uint64_t cumulative = 0;
    for (std::size_t i = 0; i < WeightSession::kDurationBuckets.size(); ++i) {
      cumulative += s.within[i];
      sample(name + "_bucket",
             label("operation", op) + "," +
                 label("le", prometheus_number(WeightSession::kDurationBuckets[i])),
             cumulative);
    }
    sample(name + "_bucket", label("operation", op) + ",le=\"+Inf\"", s.success + s.error);
    sample(name + "_sum", label("operation", op), s.seconds);
    sample(name + "_count", label("operation", op), s.success + s.error);
  }
  out << "# HELP hotswap_weight_update_operations_total Weight-update operations by outcome.\n"
         "# TYPE hotswap_weight_update_operations_total counter\n";
  for (const auto& [op, s] : stats) {
    sample("hotswap_weight_update_operations_total", label("operation", op) + ",status=\"success\"",
           s.success);
    sample("hotswap_weight_update_operations_total", label("operation", op) + ",status=\"error\"",
           s.error);
  }
  // Every rank receives the whole broadcast (vLLM's rank semantics), so a tp = N worker's total
  // is about N times what its trainer sent; the per-rank family says which rank lags.
  const auto by_rank = session.bytes_received_by_rank();
  std::uint64_t total = 0;
  for (std::uint64_t b : by_rank)
    total += b;
  out << "# HELP hotswap_weight_bytes_received_total Bytes of weights received, by all ranks.\n"
         "# TYPE hotswap_weight_bytes_received_total counter\n";
  sample("hotswap_weight_bytes_received_total", "", total);
  if (by_rank.size() > 1) {
    out << "# HELP hotswap_tensor_parallel_rank_weight_bytes_received_total Bytes of weights "
           "received by each tensor-parallel rank.\n"
           "# TYPE hotswap_tensor_parallel_rank_weight_bytes_received_total counter\n";
    for (std::size_t r = 0; r < by_rank.size(); ++r) {
      sample("hotswap_tensor_parallel_rank_weight_bytes_received_total",
             label("tp_rank", std::to_string(r)), by_rank[r]);
    }
  }
  out << "# HELP hotswap_weight_version_info The weight version being served.\n"
         "# TYPE hotswap_weight_version_info gauge\n";
  sample("hotswap_weight_version_info", label("version", version ? *version : ""), 1);
  return out.str();
}

}  // namespace hotswap::worker
