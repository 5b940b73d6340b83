#include "worker/serving/serving_metrics.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <sstream>

namespace hotswap::worker {
namespace {

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py), in seconds.
std::vector<double> ttft_bounds() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> tpot_bounds() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> request_latency_bounds() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

}  // namespace

std::string prometheus_number(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  // The shortest round-trip digits, laid out as Python's repr lays them out.
  const double magnitude = std::abs(value);
  const bool fixed = value == 0.0 || (magnitude >= 1e-4 && magnitude < 1e16);
  auto [end, error] =
      std::to_chars(buffer, buffer + sizeof(buffer), value,
                    fixed ? std::chars_format::fixed : std::chars_format::scientific);
  std::string text(buffer, end);
  if (fixed && text.find('.') == std::string::npos) text += ".0";
  return text;
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);  // le: value <= bound
  ++counts_[static_cast<std::size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& labels) const {
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? prometheus_number(bounds_[i]) : "+Inf";
    out += name + "_bucket{" + labels + ",le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += name + "_sum{" + labels + "} " + prometheus_number(sum_) + "\n";
  out += name + "_count{" + labels + "} " + std::to_string(count_) + "\n";
}

ServingMetrics::ServingMetrics()
    : ttft_(ttft_bounds()), tpot_(tpot_bounds()), e2e_(request_latency_bounds()) {}

void ServingMetrics::prompt_tokens(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += n;
}

void ServingMetrics::generation_tokens(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  generation_tokens_ += n;
}

void ServingMetrics::preemptions(std::uint64_t n) {
  std::lock_guard lock(mutex_);
  preemptions_ += n;
}

void ServingMetrics::time_to_first_token(double seconds) {
  std::lock_guard lock(mutex_);
  ttft_.observe(seconds);
}

void ServingMetrics::time_per_output_token(double seconds) {
  std::lock_guard lock(mutex_);
  tpot_.observe(seconds);
}

void ServingMetrics::request_finished(double e2e_seconds, const std::string& reason) {
  std::lock_guard lock(mutex_);
  e2e_.observe(e2e_seconds);
  ++finished_[reason];
}

std::string ServingMetrics::render(const std::string& model_name, std::size_t running,
                                   std::size_t waiting) const {
  std::lock_guard lock(mutex_);
  const std::string labels = "model_name=\"" + escape_label_value(model_name) + "\",engine=\"0\"";
  std::string out;
  auto metric = [&](const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  };
  metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.");
  out += "vllm:num_requests_running{" + labels + "} " + std::to_string(running) + "\n";
  metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.");
  out += "vllm:num_requests_waiting{" + labels + "} " + std::to_string(waiting) + "\n";
  metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.");
  out += "vllm:prompt_tokens_total{" + labels + "} " + std::to_string(prompt_tokens_) + "\n";
  metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.");
  out +=
      "vllm:generation_tokens_total{" + labels + "} " + std::to_string(generation_tokens_) + "\n";
  metric("vllm:num_preemptions_total", "counter",
         "Cumulative number of preemption from the engine.");
  out += "vllm:num_preemptions_total{" + labels + "} " + std::to_string(preemptions_) + "\n";
  metric("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const char* reason : {"stop", "length", "abort"}) {
    auto it = finished_.find(reason);
    out += "vllm:request_success_total{" + labels + ",finished_reason=\"" + reason + "\"} " +
           std::to_string(it == finished_.end() ? 0 : it->second) + "\n";
  }
  metric("vllm:time_to_first_token_seconds", "histogram",
         "Histogram of time to first token in seconds.");
  ttft_.render(out, "vllm:time_to_first_token_seconds", labels);
  metric("vllm:time_per_output_token_seconds", "histogram",
         "Histogram of time per output token in seconds.");
  tpot_.render(out, "vllm:time_per_output_token_seconds", labels);
  metric("vllm:e2e_request_latency_seconds", "histogram",
         "Histogram of e2e request latency in seconds.");
  e2e_.render(out, "vllm:e2e_request_latency_seconds", labels);
  return out;
}

std::string render_lora_requests_info(std::size_t max_loras,
                                      const std::vector<std::string>& waiting,
                                      const std::vector<std::string>& running) {
  auto joined = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& name : names)
      out += (out.empty() ? "" : ",") + name;
    return escape_label_value(out);
  };
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::ostringstream value;
  value.precision(17);
  value << now;
  return "# HELP vllm:lora_requests_info Running stats on lora requests.\n"
         "# TYPE vllm:lora_requests_info gauge\n"
         "vllm:lora_requests_info{max_lora=\"" +
         std::to_string(max_loras) + "\",waiting_lora_adapters=\"" + joined(waiting) +
         "\",running_lora_adapters=\"" + joined(running) + "\"} " + value.str() + "\n";
}

}  // namespace hotswap::worker
