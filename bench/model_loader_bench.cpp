// model_loader figures on a synthetic Llama of a few hundred MB:
//  - checkpoint load speed (GB/s), each repetition right after a plain sequential read() of the
//    same files (both from a warm page cache: the files were just written), and the ratio of the
//    medians;
//  - generation speed: prefill tokens/s, and decode tokens/s at batch 1 and 8 in bfloat16 and
//    float32, each next to Hugging Face transformers on the same checkpoint, dtype and threads
//    (bench/hf_decode_peer.py, taking turns with hotswap) where HOTSWAP_PEER_PYTHON names a
//    python with torch and transformers; without one the run says it skipped the peer.
// Every figure is the median of `--reps` repetitions (5) with its range. Prints a table and one
// JSON line per figure (`--json`: the JSON lines only).
//
// Usage: hotswap_model_loader_bench [--reps N] [--json] [DIR]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;

using bench::plain_read;
using bench::since;

namespace {

constexpr int kDecodeSteps = 8;
constexpr int kDecodePrompt = 16;

void report(const std::string& name, double value, const std::string& unit,
            const nlohmann::json& extra = nlohmann::json::object()) {
  bench::report("model_loader", name, value, unit, extra);
}

// Tokens/s of kDecodeSteps greedy steps of `batch` sequences after their first (prefill)
// token: five repetitions of eight steps cost less than one of 32 did, and the median of five
// is the steadier figure.
double hotswap_decode(const model_loader::ServableModel& model,
                      const std::vector<std::int64_t>& prompt, int batch) {
  model_loader::SamplingParams params;
  params.temperature = 0;
  params.max_tokens = kDecodeSteps + 1;
  std::vector<model_loader::Sequence> sequences;
  for (int b = 0; b < batch; ++b)
    sequences.emplace_back(
        std::vector<std::int64_t>(prompt.begin(), prompt.begin() + kDecodePrompt), params);
  std::vector<model_loader::Sequence*> pointers;
  for (auto& seq : sequences)
    pointers.push_back(&seq);
  model_loader::step(model, pointers);
  auto start = Clock::now();
  for (int i = 0; i < kDecodeSteps; ++i)
    model_loader::step(model, pointers);
  return batch * kDecodeSteps / since(start);
}

}  // namespace

int main(int argc, char** argv) {
  fs::path dir = fs::temp_directory_path() / "hotswap-bench-model";
  int reps = 5;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      bench::json_only() = true;
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else {
      dir = arg;
    }
  }
  const model_loader::ModelConfig c = bench::bench_llama();

  auto start = Clock::now();
  std::uint64_t bytes = bench::write_bench_checkpoint(dir, c);
  report("synthetic checkpoint write", bytes / since(start) / 1e9, "GB/s", {{"bytes", bytes}});

  // Written back before anything is timed: a kernel flushing 300 MB of dirty pages on the same
  // two cores took a third off the load's speed (and not the plain read's) while it ran.
  ::sync();
  plain_read(dir);  // warm the page cache for both measurements
  std::vector<double> reads, loads;
  std::shared_ptr<model_loader::ServableModel> model;
  for (int rep = 0; rep < reps; ++rep) {
    start = Clock::now();
    const std::uint64_t read_bytes = plain_read(dir);
    reads.push_back(read_bytes / since(start) / 1e9);
    model.reset();  // the previous load's memory goes first, as a worker's restart would
    start = Clock::now();
    model = model_loader::load_model(dir);
    loads.push_back(bytes / since(start) / 1e9);
  }
  bench::report_against_limit("model_loader", "checkpoint load", loads, reads, "GB/s",
                              "ratio_to_plain_read", false, {{"bytes", bytes}});
  std::vector<std::int64_t> prompt(128);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<std::int64_t>(i * 7 % 32000);
  model_loader::SamplingParams one;
  one.temperature = 0;
  one.max_tokens = 1;

  // Prefill of one 128-token prompt, then decode at batch 1 and 8, in bfloat16 (the checkpoint's
  // dtype) and float32 (converted at load); with a peer python, transformers on the same
  // checkpoint, dtype and threads takes turns with hotswap.
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  if (bench::peer_python() == nullptr) bench::say_peer_skipped();
  for (const auto dtype : {protocol::DType::kBFloat16, protocol::DType::kFloat32}) {
    const std::string dtype_name(protocol::dtype_name(dtype));
    if (dtype != protocol::DType::kBFloat16) {
      model.reset();
      model_loader::ModelOptions options;
      options.dtype = dtype;
      model = model_loader::load_model(dir, options);
    }
    model_loader::generate(*model, {prompt}, one);  // warm-up
    std::vector<double> prefill, peer_prefill;
    for (int rep = 0; rep < reps; ++rep) {
      start = Clock::now();
      model_loader::generate(*model, {prompt}, one);
      prefill.push_back(prompt.size() / since(start));
      if (auto t = bench::peer_prefill(HOTSWAP_BENCH_DIR, dir, static_cast<int>(prompt.size()),
                                       threads, dtype_name)) {
        peer_prefill.push_back(*t);
      }
    }
    const std::string prefill_what = "prefill (128-token prompt), " + dtype_name;
    if (!peer_prefill.empty()) {
      bench::report_against_limit("model_loader", prefill_what, prefill, peer_prefill, "tokens/s",
                                  "ratio_to_transformers", false, {{"dtype", dtype_name}});
    } else {
      bench::report_spread("model_loader", prefill_what, prefill, "tokens/s",
                           {{"dtype", dtype_name}});
    }
    for (int batch : {1, 8}) {
      std::vector<double> rates, peer;
      hotswap_decode(*model, prompt, batch);  // warm-up
      for (int rep = 0; rep < reps; ++rep) {
        rates.push_back(hotswap_decode(*model, prompt, batch));
        if (auto t = bench::peer_decode(HOTSWAP_BENCH_DIR, dir, batch, kDecodePrompt, kDecodeSteps,
                                        threads, dtype_name)) {
          peer.push_back(*t);
        }
      }
      const std::string what = "decode batch " + std::to_string(batch) + ", " + dtype_name;
      const nlohmann::json extra = {{"batch", batch}, {"dtype", dtype_name}};
      if (!peer.empty()) {
        bench::report_against_limit("model_loader", what, rates, peer, "tokens/s",
                                    "ratio_to_transformers", false, extra);
      } else {
        bench::report_spread("model_loader", what, rates, "tokens/s", extra);
      }
    }
  }
  if (!bench::json_only()) {
    std::printf("model: %s, %.0f MB bf16, %u threads\n", std::string(c.architecture_name()).c_str(),
                bytes / 1e6, std::thread::hardware_concurrency());
  }
  fs::remove_all(dir);
  return 0;
}
