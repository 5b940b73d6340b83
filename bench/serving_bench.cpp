// hotswap_serving_bench: what continuous batching buys a rollout server. A real hotswap-worker
// serves the same 64 completion requests (POST /v1/completions, sampled, ignore_eos, 32 tokens
// each) two ways: all at once as 64 concurrent streams, and one at a time. Figures: generated
// tokens per second of each (the ratio is the batching gain), and the time to first token of a
// stream under the 64-way load. The 64 streams are read by one client thread over epoll
// (bench/stream_fanout.hpp), as vLLM's benchmark_serving reads its streams from one event loop. The
// peer is Hugging Face transformers' batched generate() of the same 64 prompt id lists on the same
// checkpoint and thread count (bench/hf_batched_peer.py via HOTSWAP_PEER_PYTHON; without it the run
// says it skipped the peer). Beside them, the engine alone: the same requests stepped together in
// the bench's own process (model_loader::step, no HTTP), which tells the engine's share from the
// HTTP streams'. Repetitions interleave concurrent, one at a time, the engine alone and the peer;
// figures are medians with their range.
//
// Every figure is taken in float32 and in bfloat16 (the checkpoint's dtype, which the peer
// computes in too), unless --dtype picks one.
//
// With --device cuda:N the worker and the engine alone run on that GPU (on its step path: the
// kernels and decode graphs for the bfloat16 checkpoint), where the streams-over-engine ratio is
// held to 0.85x.
//
// Usage: hotswap_serving_bench [--reps N] [--requests N] [--tokens N] [--dtype float32|bfloat16]...
//                              [--device cpu|cuda:N] [--json]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/stream_fanout.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

namespace {

json body(const std::vector<std::int64_t>& prompt, int tokens, int seed, bool stream) {
  return {{"prompt", prompt},   {"max_tokens", tokens}, {"ignore_eos", true},
          {"temperature", 1.0}, {"seed", seed},         {"stream", stream}};
}

// The engine alone: the same requests (same sampling, seeds and lengths) stepped together in
// this process, as the worker's scheduler steps them, with no HTTP, JSON or client threads.
// Tokens/s from the first step to the last.
double engine_alone(const model_loader::ServableModel& model,
                    const std::vector<std::vector<std::int64_t>>& prompts, int tokens) {
  std::vector<model_loader::Sequence> sequences;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    model_loader::SamplingParams params;
    params.temperature = 1.0;
    params.seed = i;
    params.max_tokens = tokens;
    sequences.emplace_back(prompts[i], params);
  }
  std::vector<model_loader::Sequence*> batch;
  for (auto& s : sequences)
    batch.push_back(&s);
  const auto start = Clock::now();
  while (
      std::any_of(sequences.begin(), sequences.end(), [](const auto& s) { return !s.finished(); }))
    model_loader::step(model, batch);
  return static_cast<double>(prompts.size()) * tokens / bench::since(start);
}

}  // namespace

// One dtype's figures: its checkpoint, its worker, its repetitions. 0 when every stream came
// back whole.
int run(const std::string& dtype, int reps, int requests, int tokens, const std::string& device) {
  const fs::path work = fs::temp_directory_path() /
                        ("hotswap-serving-bench-" + std::to_string(::getpid()) + "-" + dtype);
  model_loader::ModelConfig config = bench::small_qwen2();
  config.torch_dtype = dtype == "bfloat16" ? protocol::DType::kBFloat16 : protocol::DType::kFloat32;
  model_loader::write_synthetic_checkpoint(work, config, {});
  fs::copy_file(fs::path(HOTSWAP_GOLDEN_DIR) / "tokenizer/qwen2/tokenizer.json",
                work / "tokenizer.json");
  const int port = transport::pick_free_port();
  transport::ChildProcess process(
      bench::worker_binary(),
      {"--model", work.string(), "--control", "tcp://127.0.0.1:*", "--http-port",
       std::to_string(port), "--max-num-seqs", "64", "--device", device});
  worker::wait_until_ready(process, std::chrono::seconds(60));

  // The prompts as ids (every client and the peer see the same ones): 30-41 tokens of text.
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(std::chrono::seconds(600));
  std::vector<std::vector<std::int64_t>> prompts;
  for (int i = 0; i < requests; ++i) {
    std::string text = "Request " + std::to_string(i) + ": hot swapping weights while serving";
    for (int k = 0; k < i % 3; ++k)
      text += " rollouts, again";
    auto res = http.Post("/tokenize", json({{"prompt", text}}).dump(), "application/json");
    prompts.push_back(json::parse(res->body)["tokens"].get<std::vector<std::int64_t>>());
  }
  const fs::path prompt_file = work / "prompts.json";
  std::ofstream(prompt_file) << json(prompts).dump();

  // The engine alone runs in this process, on the worker's checkpoint and thread count (the
  // worker sits idle meanwhile).
  model_loader::ModelOptions engine_options;
  engine_options.device = c10::Device(device);
  const auto engine = model_loader::load_model(work, engine_options);
  std::vector<double> concurrent, sequential, ttft_median, peer, alone;
  for (int rep = 0; rep < reps; ++rep) {
    // 64 streams at once, each on its own connection, read by one client thread (as vLLM's
    // benchmark_serving reads its streams from one event loop); each notes its first token.
    std::vector<std::string> bodies;
    for (int i = 0; i < requests; ++i)
      bodies.push_back(body(prompts[static_cast<std::size_t>(i)], tokens, i, true).dump());
    auto start = Clock::now();
    const auto streams = bench::stream_all(port, bodies, std::chrono::seconds(600));
    const double wall = bench::since(start);
    std::vector<double> first;
    for (const auto& s : streams) {
      if (!s.ok) {
        std::cerr << "hotswap_serving_bench: a stream failed: " << s.error << "\n";
        return 1;
      }
      first.push_back(s.first_token_s);
    }
    concurrent.push_back(requests * tokens / wall);
    std::sort(first.begin(), first.end());
    ttft_median.push_back(first[first.size() / 2] * 1000);

    start = Clock::now();
    for (int i = 0; i < requests; ++i) {
      auto res = http.Post("/v1/completions",
                           body(prompts[static_cast<std::size_t>(i)], tokens, i, false).dump(),
                           "application/json");
      if (!res || res->status != 200) {
        std::cerr << "hotswap_serving_bench: a request failed\n";
        return 1;
      }
    }
    sequential.push_back(requests * tokens / bench::since(start));
    alone.push_back(engine_alone(*engine, prompts, tokens));

    if (auto out = bench::run_peer(HOTSWAP_BENCH_DIR, "hf_batched_peer.py",
                                   {work.string(), prompt_file.string(), std::to_string(tokens),
                                    std::to_string(std::thread::hardware_concurrency()), dtype});
        out && out->contains("tokens_per_second")) {
      peer.push_back(out->at("tokens_per_second").get<double>());
    }
  }
  const json extra = {{"requests", requests},   {"max_tokens", tokens},
                      {"model", "qwen2 4x256"}, {"dtype", dtype},
                      {"device", device},       {"step_path", engine->step_path()}};
  // float32's names are those the bench always printed; bfloat16's say so.
  auto named = [&](const std::string& what) {
    return dtype == "float32" ? what : what + ", " + dtype;
  };
  bench::report_against_limit("serving", named("64 concurrent streams vs one at a time"),
                              concurrent, sequential, "tok/s", "ratio_to_sequential", false, extra);
  bench::report_spread("serving", named("time to first token under 64 streams, median"),
                       ttft_median, "ms", extra);
  if (!peer.empty()) {
    bench::report_against_limit("serving",
                                named("64 concurrent streams vs transformers generate()"),
                                concurrent, peer, "tok/s", "ratio_to_transformers", false, extra);
    bench::report_against_limit("serving",
                                named("engine alone, 64 sequences vs transformers generate()"),
                                alone, peer, "tok/s", "ratio_to_transformers", false, extra);
  } else {
    bench::report_spread("serving", named("engine alone, 64 sequences"), alone, "tok/s", extra);
  }
  bench::report_against_limit("serving", named("64 concurrent streams vs the engine alone"),
                              concurrent, alone, "tok/s", "ratio_to_engine", false, extra);
  process.stop();
  fs::remove_all(work);
  return 0;
}

int main(int argc, char** argv) {
  int reps = 5, requests = 64, tokens = 32;
  std::vector<std::string> dtypes;
  std::string device = "cpu";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--reps" && i + 1 < argc) {
      reps = std::stoi(argv[++i]);
    } else if (arg == "--requests" && i + 1 < argc) {
      requests = std::stoi(argv[++i]);
    } else if (arg == "--tokens" && i + 1 < argc) {
      tokens = std::stoi(argv[++i]);
    } else if (arg == "--dtype" && i + 1 < argc &&
               (std::string(argv[i + 1]) == "float32" || std::string(argv[i + 1]) == "bfloat16")) {
      dtypes.emplace_back(argv[++i]);
    } else if (arg == "--device" && i + 1 < argc) {
      device = argv[++i];
    } else if (arg == "--json") {
      bench::json_only() = true;
    } else {
      std::cerr << "hotswap_serving_bench: unknown argument '" << arg
                << "' (usage: hotswap_serving_bench [--reps N] [--requests N] [--tokens N] "
                   "[--dtype float32|bfloat16]... [--device cpu|cuda:N] [--json])\n";
      return 2;
    }
  }
  if (dtypes.empty()) dtypes = {"float32", "bfloat16"};
  if (bench::peer_python() == nullptr) bench::say_peer_skipped();
  for (const auto& dtype : dtypes) {
    if (int failed = run(dtype, reps, requests, tokens, device); failed != 0) return failed;
  }
  return 0;
}
