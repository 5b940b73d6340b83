// hotswap-bench --soak N: N verified rounds into one worker per CPU backend (shm, gloo,
// sparse_gloo, disk), a short greedy generation between rounds, and the worker's resources
// read from /proc at round 10 and round N: resident memory, open descriptors, threads, and
// hotswap's entries in /dev/shm. A worker that leaks shows it here: the target over 1,000
// rounds is RSS growth under 1 % and no growth at all in the other three.
#include <unistd.h>

#include <ATen/ops/randperm.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/trainer_engines.hpp"
#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_ready.hpp"

namespace hotswap::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Resources {
  double rss_mb = 0;
  int fds = 0;
  int threads = 0;
  int shm_segments = 0;
  std::map<std::string, std::string> fd_targets;  // descriptor → what it is, to name growth
};

Resources read_resources(pid_t pid) {
  // The trainer's client opens a connection per call: give the worker's I/O thread a moment to
  // close the last one, so that the count is the steady state, not the churn.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  Resources r;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with("VmRSS:")) r.rss_mb = std::stod(line.substr(6)) / 1024.0;
    if (line.starts_with("Threads:")) r.threads = std::stoi(line.substr(8));
  }
  for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) {
    ++r.fds;
    std::error_code ec;
    r.fd_targets[e.path().filename()] = fs::read_symlink(e.path(), ec).string();
  }
  for (const auto& e : fs::directory_iterator("/dev/shm")) {
    if (e.path().filename().string().starts_with("hotswap-")) ++r.shm_segments;
  }
  return r;
}

void print(const std::string& backend, int round, const Resources& r, const Resources* base) {
  std::printf("soak %-12s round %5d: rss %8.1f MB", backend.c_str(), round, r.rss_mb);
  if (base != nullptr) std::printf(" (%+.2f %%)", 100.0 * (r.rss_mb / base->rss_mb - 1.0));
  std::printf(", fds %3d, threads %3d, /dev/shm %d\n", r.fds, r.threads, r.shm_segments);
  json line = {{"bench", "soak"},
               {"backend", backend},
               {"round", round},
               {"rss_mb", r.rss_mb},
               {"fds", r.fds},
               {"threads", r.threads},
               {"shm_segments", r.shm_segments}};
  if (base != nullptr) {
    line["rss_growth"] = r.rss_mb / base->rss_mb - 1.0;
    line["fd_growth"] = r.fds - base->fds;
    line["thread_growth"] = r.threads - base->threads;
    line["shm_growth"] = r.shm_segments - base->shm_segments;
  }
  std::cout << line.dump() << std::endl;
}

}  // namespace

int run_soak(int rounds, const std::vector<std::string>& backends) {
  const std::string worker_binary = bench::worker_binary();
  fs::path work = fs::temp_directory_path() / ("hotswap-soak-" + std::to_string(::getpid()));
  // The demo's model: 4 layers, about 9 MB in bfloat16.
  model_loader::ModelConfig config;
  config.architecture = model_loader::architectures::kQwen3;
  config.hidden_size = 256;
  config.intermediate_size = 768;
  config.num_hidden_layers = 4;
  config.num_attention_heads = 8;
  config.num_key_value_heads = 4;
  config.head_dim = 64;
  config.vocab_size = 1024;
  config.qk_norm = true;
  config.torch_dtype = protocol::DType::kBFloat16;
  config = model_loader::ModelConfig::from_json(config.to_json());
  model_loader::SyntheticCheckpointOptions options;
  options.seed = 1;
  model_loader::write_synthetic_checkpoint(work / "model", config, options);
  bool all_within = true;

  for (const auto& backend : backends) {
    transport::ChildProcess worker(
        worker_binary,
        {"--model", (work / "model").string(), "--control", "tcp://127.0.0.1:*",
         "--weight-transfer-config", "{\"backend\": \"" + backend + "\"}", "--timeout", "120"});
    const std::string endpoint = worker::wait_until_ready(worker, std::chrono::seconds(120));
    auto client =
        std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, std::chrono::seconds(120));
    auto checkpoint = model_loader::Checkpoint::open(work / "model");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& name : checkpoint.names())
      tensors.emplace_back(name, checkpoint.tensor(name).clone());
    auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
    const bool sparse = backend == "sparse_gloo";

    std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine> engine;
    if (sparse) {
      trainer_sdk::SparseGlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
      engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client);
    } else {
      engine = make_cpu_trainer_engine(backend, client, source, 1 << 20, work / "shared");
    }

    Resources base;
    for (int round = 1; round <= rounds; ++round) {
      const std::string version = "soak-" + std::to_string(round);
      if (sparse) {
        // Negate 16 elements of every matrix: an exact change, so verification is bit for bit.
        std::vector<trainer_sdk::SparsePatch> patches;
        for (auto& [name, t] : tensors) {
          if (t.dim() != 2) continue;
          at::Tensor idx = at::randperm(t.numel(), at::TensorOptions().dtype(at::kLong))
                               .narrow(0, 0, std::min<std::int64_t>(16, t.numel()));
          at::Tensor flat = t.view({-1});
          at::Tensor values = flat.index_select(0, idx).neg();
          flat.index_put_({idx}, values);
          patches.push_back({name, idx.to(at::kInt), values, t.sizes().vec()});
        }
        dynamic_cast<trainer_sdk::SparseTrainerEngine&>(*engine).send_weights(patches, version);
        trainer_sdk::verify_against_source(*client, *source);
      } else {
        for (auto& [name, t] : tensors)
          t.neg_();  // exact in every dtype: every byte of the model changes each round
        engine->push({version, /*verify=*/true});
      }
      client->call("generate",
                   {{"prompt_token_ids", {1, 2, 3}}, {"max_tokens", 4}, {"temperature", 0}});
      if (round == std::min(10, rounds)) {
        base = read_resources(worker.pid());
        print(backend, round, base, nullptr);
      }
    }
    const Resources last = read_resources(worker.pid());
    print(backend, rounds, last, &base);
    const bool within = last.rss_mb <= base.rss_mb * 1.01 && last.fds <= base.fds &&
                        last.threads <= base.threads && last.shm_segments <= base.shm_segments;
    for (const auto& [fd, target] : last.fd_targets) {
      if (!base.fd_targets.contains(fd) || base.fd_targets.at(fd) != target) {
        std::printf("soak %-12s   descriptor %s -> %s is new since round 10\n", backend.c_str(),
                    fd.c_str(), target.c_str());
      }
    }
    std::printf(
        "soak %-12s %d verified rounds: %s\n", backend.c_str(), rounds,
        within ? "within target (RSS +1 %, no fd, thread or segment growth)" : "OVER target");
    all_within = all_within && within;
    engine->shutdown();
    worker.stop();
  }
  fs::remove_all(work);
  return all_within ? 0 : 3;
}

}  // namespace hotswap::bench
