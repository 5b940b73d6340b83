// What the benchmarks share: the report format (a table line and one JSON line per
// measurement), timing, a plain read of a checkpoint (the limit loading is held against), the
// synthetic model of a given size, and the worker binary beside the bench.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model_loader/model_config.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "transport/unique_fd.hpp"

namespace hotswap::bench {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// Reads every safetensors file of `dir` sequentially with read(2), 8 MiB at a time; the bytes.
inline std::uint64_t plain_read(const std::filesystem::path& dir) {
  std::vector<char> buffer(8 << 20);
  std::uint64_t total = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".safetensors") continue;
    transport::UniqueFd fd(::open(entry.path().c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) continue;
    for (ssize_t n; (n = ::read(fd.get(), buffer.data(), buffer.size())) > 0;)
      total += static_cast<std::uint64_t>(n);
  }
  return total;
}

// With --json a bench prints its JSON lines only, for scripts/bench.sh and other tools.
inline bool& json_only() {
  static bool on = false;
  return on;
}

// A bench's command line: `--json`, and `--NAME VALUE` for each count (at least 1) and path it
// names; anything else is left alone.
struct BenchFlags {
  std::map<std::string, int*> counts;
  std::map<std::string, std::filesystem::path*> paths;

  void parse(int argc, char** argv) const {
    for (int i = 1; i < argc; ++i) {
      const std::string flag = argv[i];
      if (flag == "--json") {
        json_only() = true;
        continue;
      }
      if (i + 1 >= argc) break;
      if (auto count = counts.find(flag); count != counts.end()) {
        *count->second = std::max(1, std::atoi(argv[++i]));
      } else if (auto path = paths.find(flag); path != paths.end()) {
        *path->second = argv[++i];
      }
    }
  }
};

inline void report(const std::string& bench, const std::string& what, double value,
                   const std::string& unit, nlohmann::json extra = {}) {
  if (!json_only()) {
    std::printf("%-56s %10.3f %s", what.c_str(), value, unit.c_str());
    if (extra.contains("budget_gb")) {
      const double budget = extra["budget_gb"].get<double>();
      std::printf("; budget %.3f %s (%s)", budget, unit.c_str(),
                  value <= budget ? "within" : "OVER");
    }
    std::printf("\n");
  }
  nlohmann::json line = {{"bench", bench}, {"measure", what}, {"value", value}, {"unit", unit}};
  if (extra.is_object()) line.update(extra);
  std::cout << line.dump() << std::endl;
}

// The median of repeated measurements and their range, for figures printed with their spread.
struct Spread {
  double median = 0, low = 0, high = 0;
  nlohmann::json to_json() const { return {{"median", median}, {"min", low}, {"max", high}}; }
};
inline Spread spread_of(std::vector<double> values) {
  if (values.empty()) return {};
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  const double median = n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
  return {median, values.front(), values.back()};
}

// The value at rank floor(q × n) of `values` (q in [0, 1]; 0 when there are none): the median
// at q = 0.5, the p99 at 0.99.
inline double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<std::size_t>(q * static_cast<double>(values.size())))];
}

// A figure measured once per repetition, without a limit: the median with its range.
inline void report_spread(const std::string& bench, const std::string& what,
                          const std::vector<double>& values, const std::string& unit,
                          nlohmann::json extra = {}) {
  const Spread figure = spread_of(values);
  if (!json_only()) {
    std::printf("%-56s %10.3f %s (%.3f-%.3f)\n", what.c_str(), figure.median, unit.c_str(),
                figure.low, figure.high);
  }
  nlohmann::json line = {{"bench", bench},
                         {"measure", what},
                         {"value", figure.median},
                         {"unit", unit},
                         {"spread", figure.to_json()},
                         {"repetitions", values.size()}};
  if (extra.is_object()) line.update(extra);
  std::cout << line.dump() << std::endl;
}

// A figure measured once per repetition, each time right after its limit (`limits[i]`, measured
// the same way), so that both see the same machine state: the median with its range, the
// limit's, and the ratio of the medians. `time_ratio` reports time over the limit's time (lower
// is better: limit rate / figure rate), otherwise figure rate over limit rate. Beside it, the
// median (and range) of each repetition's own ratio, `<ratio_key>_paired`: on a machine whose
// speed drifts between repetitions (a shared VM: the raw gloo broadcast ranged threefold in one
// run), the figure and the limit of one repetition drift together, and the paired ratio keeps
// the drift out where the ratio of medians takes it in.
inline void report_against_limit(const std::string& bench, const std::string& what,
                                 const std::vector<double>& values,
                                 const std::vector<double>& limits, const std::string& unit,
                                 const std::string& ratio_key, bool time_ratio,
                                 nlohmann::json extra = {}) {
  const Spread figure = spread_of(values), limit = spread_of(limits);
  const double ratio = time_ratio ? limit.median / figure.median : figure.median / limit.median;
  std::vector<double> ratios;
  for (std::size_t i = 0; i < values.size() && values.size() == limits.size(); ++i)
    ratios.push_back(time_ratio ? limits[i] / values[i] : values[i] / limits[i]);
  const Spread paired = spread_of(ratios);
  if (!json_only()) {
    std::printf("%-56s %10.3f %s (%.3f-%.3f); limit %.3f (%.3f-%.3f); %s %.2fx", what.c_str(),
                figure.median, unit.c_str(), figure.low, figure.high, limit.median, limit.low,
                limit.high, ratio_key.c_str(), ratio);
    if (!ratios.empty())
      std::printf("; paired %.2fx (%.2f-%.2f)", paired.median, paired.low, paired.high);
    std::printf("\n");
  }
  nlohmann::json line = {{"bench", bench},
                         {"measure", what},
                         {"value", figure.median},
                         {"unit", unit},
                         {"spread", figure.to_json()},
                         {"limit", limit.to_json()},
                         {"repetitions", values.size()},
                         {ratio_key, ratio}};
  if (!ratios.empty()) line[ratio_key + "_paired"] = paired.to_json();
  if (extra.is_object()) line.update(extra);
  std::cout << line.dump() << std::endl;
}

// A "Name:   N kB" field of /proc/<pid>/status, in bytes (0 when absent).
inline std::uint64_t status_bytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(field + ":")) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// Peak resident set (VmHWM) of a process, in bytes.
inline std::uint64_t peak_rss(pid_t pid) {
  return status_bytes(pid, "VmHWM");
}

// The resident pages of files a process maps (RssFile): for a worker, the code of libtorch and
// the libraries it loads (~0.1 GB, shared with every process that uses them, the same whatever
// the model); checkpoints are read, not mapped.
inline std::uint64_t resident_file_bytes(pid_t pid) {
  return status_bytes(pid, "RssFile");
}

// A bf16 Llama of about `gigabytes`: 2048 wide, vocab 32000, layers chosen for the size (each
// ~0.2 GB).
inline model_loader::ModelConfig llama_of_size(double gigabytes) {
  model_loader::ModelConfig c;
  c.hidden_size = 2048;
  c.intermediate_size = 5632;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  c.vocab_size = 32000;
  c.torch_dtype = protocol::DType::kBFloat16;
  double embed = 2.0 * 2 * 32000 * 2048 / 1e9,
         layer = 2.0 * (2048.0 * 3072 + 2048.0 * 2048 + 3.0 * 2048 * 5632) / 1e9;
  c.num_hidden_layers =
      std::max<std::int64_t>(1, static_cast<std::int64_t>((gigabytes - embed) / layer));
  return model_loader::ModelConfig::from_json(c.to_json());
}

// The decode benches' model: a bfloat16 Llama 1024 wide, 8 layers, vocabulary 32000 (about
// 0.33 GB), large enough that a step's matmuls, not its bookkeeping, set its speed.
inline model_loader::ModelConfig bench_llama() {
  model_loader::ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.hidden_size = 1024;
  c.intermediate_size = 2816;
  c.num_hidden_layers = 8;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.vocab_size = 32000;
  c.max_position_embeddings = 4096;
  c.torch_dtype = protocol::DType::kBFloat16;
  return model_loader::ModelConfig::from_json(c.to_json());
}

// `config`'s checkpoint written at `dir` with the benches' seed, so that every bench measures the
// same weights; the bytes of tensor data written.
inline std::uint64_t write_bench_checkpoint(const std::filesystem::path& dir,
                                            const model_loader::ModelConfig& config) {
  model_loader::SyntheticCheckpointOptions synthetic;
  synthetic.seed = 1;
  return model_loader::write_synthetic_checkpoint(dir, config, synthetic);
}

// A small float32 Qwen2 (4 layers, 256 wide, the qwen2 golden tokenizer's 512 ids, about 5 MB),
// so that serving benches on a 2-core machine give figures in seconds.
inline model_loader::ModelConfig small_qwen2() {
  model_loader::ModelConfig c;
  c.architecture = "Qwen2ForCausalLM";
  c.hidden_size = 256;
  c.intermediate_size = 704;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.vocab_size = 512;
  c.max_position_embeddings = 1024;
  c.qkv_bias = true;
  c.torch_dtype = protocol::DType::kFloat32;
  return model_loader::ModelConfig::from_json(c.to_json());
}

// bench/<this> → worker/hotswap-worker in the same build tree.
inline std::string worker_binary() {
  return (std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() /
          "worker/hotswap-worker")
      .string();
}

// The python that runs a bench's peer (Hugging Face transformers on the same checkpoint):
// HOTSWAP_PEER_PYTHON, a virtual environment outside the repository; null when unset, and the
// bench then says that it skipped the peer.
inline const char* peer_python() {
  return std::getenv("HOTSWAP_PEER_PYTHON");
}

inline void say_peer_skipped() {
  if (!json_only()) {
    std::printf(
        "peer: skipped (set HOTSWAP_PEER_PYTHON to a python with torch and transformers to "
        "compare with Hugging Face transformers on the same checkpoint)\n");
  }
}

// Runs bench/<script> (under `bench_dir`) with peer_python() and `arguments` (each quoted), and
// returns the last JSON object it printed; nullopt when there is no peer python or it failed.
inline std::optional<nlohmann::json> run_peer(const std::filesystem::path& bench_dir,
                                              const std::string& script,
                                              const std::vector<std::string>& arguments) {
  const char* python = peer_python();
  if (python == nullptr) return std::nullopt;
  auto quoted = [](const std::string& s) { return "'" + s + "'"; };
  std::string command = quoted(python) + " " + quoted((bench_dir / script).string());
  for (const auto& a : arguments)
    command += " " + quoted(a);
  command += " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), ::pclose);
  if (!pipe) return std::nullopt;
  std::string out;
  char buffer[4096];
  while (std::fgets(buffer, sizeof buffer, pipe.get()) != nullptr)
    out += buffer;
  const auto brace = out.rfind('{');
  if (brace == std::string::npos) return std::nullopt;
  try {
    return nlohmann::json::parse(out.substr(brace));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// transformers' greedy decode tokens/s (bench/hf_decode_peer.py) on `dir`: `batch` sequences of
// the benches' prompt (token i = i * 7 mod vocab) of `prompt` tokens, `steps` steps timed.
inline std::optional<double> peer_decode(const std::filesystem::path& bench_dir,
                                         const std::filesystem::path& dir, int batch, int prompt,
                                         int steps, unsigned threads,
                                         const std::string& dtype = "auto") {
  auto out = run_peer(
      bench_dir, "hf_decode_peer.py",
      {dir.string(), "--batch", std::to_string(batch), "--prompt", std::to_string(prompt),
       "--steps", std::to_string(steps), "--threads", std::to_string(threads), "--dtype", dtype});
  if (!out || !out->contains("tokens_per_second")) return std::nullopt;
  return out->at("tokens_per_second").get<double>();
}

// transformers' prefill tokens/s (bench/hf_decode_peer.py with no decode steps) of one prompt of
// `prompt` tokens (the benches' prompt) on `dir`.
inline std::optional<double> peer_prefill(const std::filesystem::path& bench_dir,
                                          const std::filesystem::path& dir, int prompt,
                                          unsigned threads, const std::string& dtype = "auto") {
  auto out = run_peer(bench_dir, "hf_decode_peer.py",
                      {dir.string(), "--batch", "1", "--prompt", std::to_string(prompt), "--steps",
                       "0", "--threads", std::to_string(threads), "--dtype", dtype});
  if (!out || !out->contains("prefill_tokens_per_second")) return std::nullopt;
  return out->at("prefill_tokens_per_second").get<double>();
}

}  // namespace hotswap::bench
