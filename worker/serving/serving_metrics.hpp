// ServingMetrics: the request-serving figures vLLM exposes on /metrics, under vLLM's names, so
// dashboards built for vLLM read a hotswap worker unchanged: requests running and waiting,
// prompt and generation token totals, finished requests by reason, and histograms of time to
// first token, time per output token and end-to-end latency (vLLM's bucket bounds). The
// generation scheduler records into it; /metrics renders it beside the weight-update counters.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace hotswap::worker {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Prometheus text lines (`_bucket` with cumulative counts and +Inf, `_sum`, `_count`).
  void render(std::string& out, const std::string& name, const std::string& labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bound, not cumulative; the last is +Inf
  double sum_ = 0;
  std::uint64_t count_ = 0;
};

class ServingMetrics {
 public:
  ServingMetrics();

  void prompt_tokens(std::uint64_t n);
  void generation_tokens(std::uint64_t n);
  // Sequences a step left out to free KV cache blocks (they recompute later).
  void preemptions(std::uint64_t n);
  void time_to_first_token(double seconds);
  void time_per_output_token(double seconds);
  // `reason` is vLLM's finished_reason label: stop, length or abort.
  void request_finished(double e2e_seconds, const std::string& reason);

  // The exposition, with the scheduler's current running and waiting counts.
  std::string render(const std::string& model_name, std::size_t running, std::size_t waiting) const;

 private:
  mutable std::mutex mutex_;
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t generation_tokens_ = 0;
  std::uint64_t preemptions_ = 0;
  std::map<std::string, std::uint64_t> finished_;
  Histogram ttft_;
  Histogram tpot_;
  Histogram e2e_;
};

// A label value as the exposition format writes it: backslash, double quote and newline
// escaped.
std::string escape_label_value(const std::string& value);

// vLLM's vllm:lora_requests_info gauge (with --enable-lora): --max-loras and the adapters of the
// waiting and the running requests, comma-separated, as labels; its value the time it was read
// (seconds since the epoch), as vLLM sets it.
std::string render_lora_requests_info(std::size_t max_loras,
                                      const std::vector<std::string>& waiting,
                                      const std::vector<std::string>& running);

// A float as Prometheus' Python client (vLLM's) writes it, which is Python's repr: the shortest
// text that reads back as the same double, fixed between 1e-4 and 1e16 and with ".0" on whole
// numbers (0.1, 0.025, 600.0), else scientific (1e-05, 1e+16). Every bucket bound (`le`) and
// every float sample of /metrics is written through it.
std::string prometheus_number(double value);

}  // namespace hotswap::worker
