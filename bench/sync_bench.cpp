// hotswap-bench: a full sync, end to end (the trainer's send_weights start → the worker's
// commit), per backend, for synthetic bf16 Llama models of about 0.5 and 2 GB (8 GB with
// --large, where memory allows), each held against the machine's own limit: one single-thread
// memcpy of the same bytes (shm), a raw gloo broadcast of the same bytes over loopback (gloo);
// the shm ring also against two memcpys of the model at once (its own two copies' limit).
// After a warm-up round, each of `--reps` repetitions (5) measures the limit and then a sync
// right after it, so both see the same machine state; the figure is the median with its range
// and the ratio of the medians. Also the worker's peak RSS during a staged update, against
// model + shadow + buffers + 10 % + the runtime's own resident set (its libraries' code, and the
// heap an idle worker holds), and where a round's time goes (bench/round_split.hpp: each call's
// time and the trainer's between them). Prints a table and one JSON line per figure (`--json`:
// the JSON lines only).
//
// Usage: hotswap-bench [--large] [--size GB]... [--reps N] [--only VARIANT]... [--json]
//        (--size: just models of those sizes; --only shm, shm+arena, gloo, "gloo unpacked" or
//        "shm window" (the ring through its stream window, not in the default run):
//        just those rows; e.g. to profile one)
//        hotswap-bench --soak N [shm|gloo|sparse_gloo|disk ...]   (bench/soak.cpp)
#include <unistd.h>

#include <ATen/ops/empty.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "bench/round_split.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/shared_weight_arena.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;
using bench::llama_of_size;
using bench::peak_rss;
using bench::since;
using nlohmann::json;

namespace {

// One memcpy of `bytes` (single thread), the limit shm is held against.
double memcpy_seconds(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes);
  std::memcpy(b.data(), a.data(), bytes);  // fault the pages in first
  auto t = Clock::now();
  std::memcpy(b.data(), a.data(), bytes);
  return since(t);
}

// Two memcpys of `bytes` at once, one per thread, from one source into two destinations: the
// ring's own work (the trainer copies every byte in while the worker copies it out), so the
// limit that two copies sharing the machine's memory bandwidth put on it. The time until both
// end.
double concurrent_memcpys_seconds(std::size_t bytes) {
  std::vector<char> from(bytes, 1), a(bytes), b(bytes);
  std::memcpy(a.data(), from.data(), bytes);  // fault the pages in first
  std::memcpy(b.data(), from.data(), bytes);
  std::atomic<int> ready{0};
  auto copy_into = [&](std::vector<char>& to) {
    ++ready;
    while (ready.load() < 2) {
    }  // both start together
    std::memcpy(to.data(), from.data(), bytes);
  };
  auto t = Clock::now();
  std::thread other([&] { copy_into(b); });
  copy_into(a);
  other.join();
  return since(t);
}

// A raw gloo broadcast of `bytes` between two ranks in this process, the limit gloo is held
// against.
double raw_gloo_seconds(std::size_t bytes) {
  int port = transport::pick_free_port();
  at::Tensor root =
      at::empty({static_cast<std::int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte)).fill_(1);
  at::Tensor peer =
      at::empty({static_cast<std::int64_t>(bytes)}, at::TensorOptions().dtype(at::kByte));
  double seconds = 0;
  // Twice, timing the second: the first faults in the receiver's pages, as the sync's first
  // round does before the round that is measured. An all-reduce lines the two ranks up between.
  auto twice = [&](transport::GlooCommunicator& c, at::Tensor& buffer) {
    const auto timeout = std::chrono::seconds(120);
    c.broadcast(buffer, 0, timeout);
    at::Tensor one = at::empty({1}, at::TensorOptions().dtype(at::kFloat)).fill_(1);
    c.all_reduce_sum(one, timeout);
    auto t = Clock::now();
    c.broadcast(buffer, 0, timeout);
    return t;
  };
  std::thread other([&] {
    transport::GlooCommunicator c({"127.0.0.1", port, 1, 2, std::chrono::seconds(120)});
    twice(c, peer);
  });
  transport::GlooCommunicator c({"127.0.0.1", port, 0, 2, std::chrono::seconds(120)});
  auto t = twice(c, root);
  other.join();
  seconds = since(t);
  return seconds;
}

// The anonymous memory a worker of a one-layer, 0.1 MB model holds once ready: what the runtime
// itself allocates at load, whatever the model.
std::uint64_t idle_worker_heap(const std::string& worker_binary, const fs::path& dir) {
  model_loader::ModelConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 256;
  c.torch_dtype = protocol::DType::kBFloat16;
  model_loader::write_synthetic_checkpoint(dir, model_loader::ModelConfig::from_json(c.to_json()),
                                           {});
  transport::ChildProcess worker(worker_binary,
                                 {"--model", dir.string(), "--control", "tcp://127.0.0.1:*"});
  worker::wait_until_ready(worker, std::chrono::seconds(120));
  const std::uint64_t heap = bench::status_bytes(worker.pid(), "RssAnon");
  worker.stop();
  fs::remove_all(dir);
  return heap;
}

}  // namespace

int run(int argc, char** argv);

namespace hotswap::bench {
// bench/soak.cpp: `hotswap-bench --soak N [backend ...]`.
int run_soak(int rounds, const std::vector<std::string>& backends);
}  // namespace hotswap::bench

// Errors unwind (stopping the worker processes and freeing shared memory) before the exit.
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hotswap-bench: " << e.what() << "\n";
    return 1;
  }
}

int run(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "--soak") {
    std::vector<std::string> backends(argv + 3, argv + argc);
    if (backends.empty()) backends = {"shm", "gloo", "sparse_gloo", "disk"};
    return bench::run_soak(std::stoi(argv[2]), backends);
  }
  bool large = false;
  int reps = 5;
  std::vector<std::string> variants = {"shm", "shm+arena", "gloo", "gloo unpacked"}, only;
  // Selectable with --only: the shm ring through its stream window (ShmTrainerInitInfo::
  // stream_window), off by default.
  const std::vector<std::string> extra_variants = {"shm window"};
  std::vector<double> sizes = {0.5, 2.0}, sizes_given;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--large") {
      large = true;
    } else if (arg == "--json") {
      bench::json_only() = true;
    } else if (arg == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::stoi(argv[++i]));
    } else if (arg == "--size" && i + 1 < argc) {
      sizes_given.push_back(std::stod(argv[++i]));
    } else if (arg == "--only" && i + 1 < argc &&
               (std::find(variants.begin(), variants.end(), argv[i + 1]) != variants.end() ||
                std::find(extra_variants.begin(), extra_variants.end(), argv[i + 1]) !=
                    extra_variants.end())) {
      only.push_back(argv[++i]);
    } else {
      throw std::invalid_argument(
          "unknown argument '" + arg +
          "' (usage: hotswap-bench [--large] [--size GB]... [--reps N] "
          "[--only shm|shm+arena|gloo|'gloo unpacked'|'shm window']... [--json])");
    }
  }
  if (!only.empty()) variants = only;
  if (!sizes_given.empty()) sizes = sizes_given;
  const std::string worker_binary = bench::worker_binary();
  fs::path work = fs::temp_directory_path() / ("hotswap-sync-bench-" + std::to_string(::getpid()));
  if (large) sizes.push_back(8.0);
  const std::uint64_t runtime_heap = idle_worker_heap(worker_binary, work / "one-layer");

  for (double gb : sizes) {
    auto config = llama_of_size(gb);
    model_loader::SyntheticCheckpointOptions options;
    options.seed = 1;
    std::uint64_t bytes = model_loader::write_synthetic_checkpoint(work / "model", config, options);
    std::string size = std::to_string(bytes / 1000000) + " MB";

    // The trainer's source: the checkpoint, one step along.
    auto checkpoint = model_loader::Checkpoint::open(work / "model");
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (const auto& name : checkpoint.names())
      tensors.emplace_back(name, checkpoint.tensor(name).clone().add_(1));
    auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);

    // The same source, its tensors kept in a shared weight arena: shm workers read them in place.
    std::vector<std::pair<std::string, at::Tensor>> arena_tensors;
    std::vector<protocol::ParamMeta> meta = source->metadata();
    auto arena = std::make_shared<trainer_sdk::SharedWeightArena>(
        trainer_sdk::SharedWeightArena::bytes_for(meta));
    for (const auto& [name, t] : tensors)
      arena_tensors.emplace_back(name, arena->copy_in(name, t));
    auto arena_source = std::make_shared<trainer_sdk::TensorListSource>(arena_tensors);

    for (const std::string& label : variants) {
      const std::string backend = label.starts_with("gloo") ? "gloo" : "shm";
      transport::ChildProcess worker(
          worker_binary,
          {"--model", (work / "model").string(), "--control", "tcp://127.0.0.1:*",
           "--weight-transfer-config", "{\"backend\": \"" + backend + "\"}", "--timeout", "600"});
      std::string endpoint = worker::wait_until_ready(worker, std::chrono::seconds(120));
      auto client = std::make_shared<bench::TimedClient>(
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, std::chrono::seconds(600)));
      std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine> engine;
      std::uint64_t buffers = 0;  // what the worker maps besides the model and its shadow
      if (backend == "shm") {
        trainer_sdk::ShmTrainerInitInfo info(1, 0);
        // As small as the largest tensor allows (the IPC chunk rule): smaller buffers pipeline
        // better, the trainer filling one while the worker empties the other.
        std::int64_t largest = 0;
        for (const auto& [name, t] : tensors)
          largest = std::max<std::int64_t>(largest, t.nbytes());
        info.packed_buffer_size_bytes = largest;
        info.timeout = std::chrono::seconds(600);
        buffers = 2 * info.packed_buffer_size_bytes;
        if (label == "shm+arena") {
          info.arena = arena;
          buffers += arena->capacity();
        }
        info.stream_window = label == "shm window";
        engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
            info, client, label == "shm+arena" ? arena_source : source);
      } else {
        trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
        info.packed_buffer_size_bytes = 256ll << 20;
        info.timeout = std::chrono::seconds(600);
        // Unpacked, each tensor is broadcast from the trainer's own memory into the worker's
        // staged copy: no packing on either side.
        info.packed = label == "gloo";
        buffers = info.packed ? 2 * info.packed_buffer_size_bytes : 0;
        engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
      }
      // The first round faults in the shadow and buffer pages; the steady state comes after.
      engine->send_weights();
      std::vector<double> limits, syncs, pair_limits;
      bench::RoundSplit split;
      const bool ring = backend == "shm" && label != "shm+arena";
      for (int rep = 0; rep < reps; ++rep) {
        const double limit_seconds =
            backend == "shm" ? memcpy_seconds(bytes) : raw_gloo_seconds(bytes);
        limits.push_back(bytes / limit_seconds / 1e9);
        if (ring) pair_limits.push_back(bytes / concurrent_memcpys_seconds(bytes) / 1e9);
        client->take();
        auto t = Clock::now();
        engine->send_weights();
        const double seconds = since(t);
        syncs.push_back(bytes / seconds / 1e9);
        split.add(*client, seconds);
      }
      json extra = {{"bytes", bytes}, {"backend", backend}, {"variant", label}};
      split.report("sync", "model " + size + ": " + label, extra);
      if (backend == "shm") {
        // Time over one memcpy's time: target ≤ 1.25 through the ring, ≤ 1.0 with the arena.
        bench::report_against_limit("sync", "model " + size + ": full sync over " + label, syncs,
                                    limits, "GB/s", "ratio_of_memcpy_time", true, extra);
        // Through the ring every byte is copied twice at once: target ≤ 1.25 of that limit.
        if (ring) {
          bench::report_against_limit(
              "sync", "model " + size + ": full sync over " + label + " vs two concurrent memcpys",
              syncs, pair_limits, "GB/s", "ratio_of_two_memcpys_time", true, extra);
        }
      } else {
        // Rate over a raw broadcast's: target ≥ 0.9.
        bench::report_against_limit("sync", "model " + size + ": full sync over " + label, syncs,
                                    limits, "GB/s", "ratio_to_raw_gloo", false, extra);
      }
      // Budget: model + shadow + buffers + 10 %, plus the runtime's own resident set: its
      // libraries' code as measured in this worker, and the heap libtorch (with CUDA: its
      // kernels' registrations) holds from load, as measured in an idle worker of a one-layer
      // model. Both are fixed, about 0.2 GB each with torch 2.14, that 10 % of a small model
      // cannot hold.
      std::uint64_t rss = peak_rss(worker.pid());
      std::uint64_t code = bench::resident_file_bytes(worker.pid());
      std::uint64_t budget =
          static_cast<std::uint64_t>(1.1 * (2.0 * bytes + buffers)) + code + runtime_heap;
      bench::report("sync", "model " + size + ": worker peak RSS, staged, " + label, rss / 1e9,
                    "GB",
                    {{"budget_gb", budget / 1e9},
                     {"code_gb", code / 1e9},
                     {"runtime_heap_gb", runtime_heap / 1e9},
                     {"within_budget", rss <= budget}});
      engine->shutdown();
      worker.stop();
    }
    fs::remove_all(work / "model");
  }
  fs::remove_all(work);
  return 0;
}
