// How long a new LoRA adapter takes to reach a serving worker, in one run: pushed through the
// weight-transfer contract (hotswap's adapter round) over shm and over gloo, against what RL
// stacks do with vLLM today, the same adapter written to disk in PEFT's format and loaded with
// POST /v1/load_lora_adapter (load_inplace). Each is timed from the trainer's tensors in memory
// to the adapter served; the shm push is timed verified too (the workers' digests of the adapter
// compared with the trainer's). Three workers serve the bench model with --enable-lora, one per
// way; the ways take turns, --reps times each; figures are medians with their range, and each
// push's speed-up over the disk round trip of the same repetition.
//
//   hotswap_lora_push_bench [--reps 7] [--rank 16] [--dir DIR] [--json]
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/lora_adapter_files.hpp"
#include "bench/trainer_engines.hpp"
#include "model_loader/lora/lora_staging.hpp"
#include "model_loader/servable_model.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "transport/child_process.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

struct Worker {
  std::unique_ptr<transport::ChildProcess> process;
  std::shared_ptr<trainer_sdk::ZmqWeightSyncClient> client;
  int http_port = 0;
};

Worker start_worker(const fs::path& model, const std::string& backend, std::int64_t rank) {
  Worker w;
  w.http_port = transport::pick_free_port();
  w.process = std::make_unique<transport::ChildProcess>(
      bench::worker_binary(),
      std::vector<std::string>{"--model", model.string(), "--control", "tcp://127.0.0.1:*",
                               "--http-port", std::to_string(w.http_port), "--enable-lora",
                               "--max-lora-rank", std::to_string(rank), "--weight-transfer-config",
                               "{\"backend\": \"" + backend + "\"}", "--timeout", "600"});
  const std::string endpoint = worker::wait_until_ready(*w.process, std::chrono::seconds(180));
  w.client =
      std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, std::chrono::seconds(600));
  return w;
}

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7, rank_flag = 16;
  fs::path dir = fs::temp_directory_path() / "hotswap-lora-push-bench";
  bench::BenchFlags{{{"--reps", &reps}, {"--rank", &rank_flag}}, {{"--dir", &dir}}}.parse(argc,
                                                                                          argv);
  const std::int64_t rank = rank_flag;
  const auto config = bench::bench_llama();
  fs::remove_all(dir);
  const std::uint64_t model_bytes = bench::write_bench_checkpoint(dir / "model", config);
  // The trainer's adapter: its tensors live in this process, as a trainer's do.
  const auto tensors = bench::random_lora_tensors(config, rank, 7);
  std::uint64_t adapter_bytes = 0, largest = 0;
  for (const auto& [name, t] : tensors) {
    adapter_bytes += t.nbytes();
    largest = std::max<std::uint64_t>(largest, t.nbytes());
  }
  const nlohmann::json adapter_config = bench::lora_adapter_config(rank);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);

  // vLLM's guard on the load route, which the disk way needs.
  setenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True", 1);
  Worker shm = start_worker(dir / "model", "shm", rank);
  Worker gloo = start_worker(dir / "model", "gloo", rank);
  Worker loader = start_worker(dir / "model", "disk", rank);
  const auto buffer = static_cast<std::int64_t>(std::max<std::uint64_t>(largest, 4 << 20));
  auto shm_engine =
      bench::make_cpu_trainer_engine("shm", shm.client, source, buffer, dir / "unused");
  auto gloo_engine =
      bench::make_cpu_trainer_engine("gloo", gloo.client, source, buffer, dir / "unused");
  httplib::Client http("127.0.0.1", loader.http_port);
  http.set_read_timeout(std::chrono::seconds(600));
  if (!bench::json_only()) {
    std::printf(
        "model: %s, %.0f MB bf16, %lld layers; adapter rank %lld on 7 projections, %.1f MB "
        "float32 (%zu tensors); %d repetitions\n",
        config.architecture_name().c_str(), model_bytes / 1e6,
        static_cast<long long>(config.num_hidden_layers), static_cast<long long>(rank),
        adapter_bytes / 1e6, tensors.size(), reps);
  }

  const trainer_sdk::AdapterTarget target{"policy", adapter_config};
  auto push = [&](trainer_sdk::TrainerWeightTransferEngine& engine, bool verify, int round) {
    const auto start = Clock::now();
    engine.push({"round-" + std::to_string(round), verify, target});
    return milliseconds_since(start);
  };
  // vLLM's way: save_pretrained's files, then the load route; a new directory each time, as a
  // trainer writing a checkpoint per step does.
  auto disk_round_trip = [&](int round) {
    const fs::path adapter = dir / ("adapter-" + std::to_string(round));
    const auto start = Clock::now();
    bench::write_lora_adapter(adapter, rank, tensors);
    auto res = http.Post(
        "/v1/load_lora_adapter",
        nlohmann::json(
            {{"lora_name", "policy"}, {"lora_path", adapter.string()}, {"load_inplace", true}})
            .dump(),
        "application/json");
    const double ms = milliseconds_since(start);
    if (!res || res->status != 200) {
      std::fprintf(stderr, "load_lora_adapter failed: %s\n", res ? res->body.c_str() : "no reply");
      std::exit(1);
    }
    fs::remove_all(adapter);
    return ms;
  };

  // A warm-up of each: the first round creates the adapter slot.
  push(*shm_engine, false, 0);
  push(*gloo_engine, false, 0);
  disk_round_trip(0);
  // What of a push is the worker building the adapter: the same staging a round retargets its
  // receive at, fed the tensors in this process, then built (digests, fused and scaled pairs).
  auto model = model_loader::load_model(dir / "model");
  const std::vector<model_loader::NamedTensor> named(tensors.begin(), tensors.end());
  auto build_alone = [&] {
    model_loader::LoraStaging staging(*model->weight_mapping(), model->device(),
                                      model_loader::LoraConfig::from_json(adapter_config, rank), {},
                                      [](std::shared_ptr<const model_loader::LoraAdapter>) {});
    const auto start = Clock::now();
    staging.start_reload();
    staging.load_weights(named);
    staging.finish_reload();
    return milliseconds_since(start);
  };
  build_alone();
  std::vector<double> disk, over_shm, over_gloo, shm_verified, built;
  for (int r = 1; r <= reps; ++r) {  // interleaved: each way sees the same machine weather
    disk.push_back(disk_round_trip(r));
    over_shm.push_back(push(*shm_engine, false, r));
    over_gloo.push_back(push(*gloo_engine, false, r));
    shm_verified.push_back(push(*shm_engine, true, r));
    built.push_back(build_alone());
  }
  const nlohmann::json extra = {{"rank", rank}, {"adapter_mb", adapter_bytes / 1e6}};
  bench::report_spread("lora_push", "disk + /v1/load_lora_adapter", disk, "ms", extra);
  bench::report_against_limit("lora_push", "push over shm", over_shm, disk, "ms",
                              "speedup_over_disk", true, extra);
  bench::report_against_limit("lora_push", "push over gloo", over_gloo, disk, "ms",
                              "speedup_over_disk", true, extra);
  bench::report_against_limit("lora_push", "push over shm, verified", shm_verified, disk, "ms",
                              "speedup_over_disk", true, extra);
  bench::report_spread("lora_push", "the worker's build alone (staging, digests, pairs)", built,
                       "ms", extra);
  shm_engine->shutdown();
  gloo_engine->shutdown();
  fs::remove_all(dir);
  return 0;
}
