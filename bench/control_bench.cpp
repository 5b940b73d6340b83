// Worker control-plane figures, against a real hotswap-worker process on loopback:
//  - round trip of `health` (median, p99);
//  - one four-call round (init, start, update, finish) over the disk backend with a tiny
//    checkpoint, whose load is a small part of it (target: under 1 ms);
//  - disk-backend update throughput on a few-hundred-MB checkpoint, next to a plain sequential
//    read() of the same files in the same run.
// Prints a table and one JSON line per measurement.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_support.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;
using bench::plain_read;
using nlohmann::json;

namespace {

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void report(const std::string& name, double value, const std::string& unit, json extra = {}) {
  bench::report("control", name, value, unit, std::move(extra));
}

model_loader::ModelConfig llama(std::int64_t hidden, std::int64_t layers, std::int64_t vocab) {
  model_loader::ModelConfig c;
  c.hidden_size = hidden;
  c.intermediate_size = hidden * 11 / 4;
  c.num_hidden_layers = layers;
  c.num_attention_heads = hidden / 64;
  c.num_key_value_heads = std::max<std::int64_t>(1, hidden / 256);
  c.head_dim = 64;
  c.vocab_size = vocab;
  c.torch_dtype = protocol::DType::kBFloat16;
  return model_loader::ModelConfig::from_json(c.to_json());
}

// Starts a worker on `model` and returns it with its endpoint.
std::pair<std::unique_ptr<transport::ChildProcess>, std::string> start_worker(
    const std::string& binary, const fs::path& model) {
  auto p = std::make_unique<transport::ChildProcess>(
      binary, std::vector<std::string>{"--model", model.string(), "--control", "tcp://127.0.0.1:*",
                                       "--weight-transfer-config", R"({"backend": "disk"})"});
  std::string endpoint = worker::wait_until_ready(*p, std::chrono::seconds(60));
  return {std::move(p), endpoint};
}

}  // namespace

int main(int argc, char** argv) {
  std::string worker_binary =
      argc > 1
          ? argv[1]
          : (fs::canonical("/proc/self/exe").parent_path().parent_path() / "worker/hotswap-worker")
                .string();
  fs::path work =
      fs::temp_directory_path() / ("hotswap-control-bench-" + std::to_string(::getpid()));
  model_loader::SyntheticCheckpointOptions options;
  model_loader::write_synthetic_checkpoint(work / "tiny_a", llama(128, 2, 512), options);
  options.seed = 1;
  model_loader::write_synthetic_checkpoint(work / "tiny_b", llama(128, 2, 512), options);
  std::uint64_t big_bytes =
      model_loader::write_synthetic_checkpoint(work / "big_a", llama(1024, 8, 32000), options);
  options.seed = 2;
  model_loader::write_synthetic_checkpoint(work / "big_b", llama(1024, 8, 32000), options);
  ::sync();  // written back before anything is timed (see model_loader_bench.cpp)

  {
    auto [proc, endpoint] = start_worker(worker_binary, work / "tiny_a");
    trainer_sdk::RpcClient client(endpoint, std::chrono::seconds(30));
    for (int i = 0; i < 100; ++i)
      client.call("health");
    std::vector<double> rtt;
    for (int i = 0; i < 2000; ++i) {
      auto t = Clock::now();
      client.call("health");
      rtt.push_back(ms_since(t));
    }
    report("health round trip, median", bench::percentile(rtt, 0.5), "ms");
    report("health round trip, p99", bench::percentile(rtt, 0.99), "ms");

    std::vector<double> rounds;
    std::vector<std::vector<double>> calls(4);  // each call's share, to see where a round goes
    for (int i = 0; i < 200; ++i) {
      fs::path next = work / (i % 2 ? "tiny_a" : "tiny_b");
      auto t = Clock::now();
      auto timed = [&](std::size_t k, const char* method, const json& params) {
        auto c = Clock::now();
        client.call(method, params);
        calls[k].push_back(ms_since(c));
      };
      timed(0, "init_weight_transfer_engine", {{"init_info", json::object()}});
      timed(1, "start_weight_update", json::object());
      timed(2, "update_weights", {{"update_info", {{"path", next.string()}}}});
      timed(3, "finish_weight_update", {{"weight_version", std::to_string(i)}});
      rounds.push_back(ms_since(t));
    }
    report("four-call round (disk, 0.4 MB checkpoint), median", bench::percentile(rounds, 0.5),
           "ms");
    const char* names[] = {"init_weight_transfer_engine", "start_weight_update", "update_weights",
                           "finish_weight_update"};
    for (std::size_t k = 0; k < calls.size(); ++k)
      report(std::string("  of which ") + names[k] + ", median", bench::percentile(calls[k], 0.5),
             "ms");
    client.call("shutdown");
    proc->wait_exit(std::chrono::seconds(30));
  }

  {
    auto [proc, endpoint] = start_worker(worker_binary, work / "big_a");
    trainer_sdk::RpcClient client(endpoint, std::chrono::seconds(120));
    client.call("init_weight_transfer_engine", {{"init_info", json::object()}});
    std::vector<double> update_gbps, read_gbps;
    // Five repetitions, each update right after a plain read of the same files.
    for (int i = 0; i < 5; ++i) {
      fs::path next = work / (i % 2 ? "big_a" : "big_b");
      plain_read(next);  // warm, as the update will find it
      auto t = Clock::now();
      std::uint64_t bytes = plain_read(next);
      read_gbps.push_back(bytes / ms_since(t) / 1e6);
      client.call("start_weight_update");
      t = Clock::now();
      client.call("update_weights", {{"update_info", {{"path", next.string()}}}});
      client.call("finish_weight_update");
      update_gbps.push_back(big_bytes / ms_since(t) / 1e6);
    }
    bench::report_against_limit("control", "disk-backend update + commit, staged", update_gbps,
                                read_gbps, "GB/s", "ratio_to_plain_read", false,
                                {{"bytes", big_bytes}});
    client.call("shutdown");
    proc->wait_exit(std::chrono::seconds(30));
  }
  fs::remove_all(work);
  return 0;
}
