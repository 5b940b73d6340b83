// Tensor parallelism against one rank on the same model, in the same run: decode tokens/s of a
// greedy generate (batch 1) and the time of a full sync over gloo into a tp = 1 worker and a
// tp = 2 worker, each repetition measuring both back to back; and what each rank of the tp = 2
// worker receives (the whole broadcast, as in vLLM) against what it keeps (its shard).
//
// On a 2-core machine this shows tensor parallelism's cost, not its speed-up: both ranks share
// the same two cores and every layer adds two all-reduces over loopback, where on a GPU host
// each rank has a device of its own.
//
// Usage: hotswap_tensor_parallel_bench [repetitions (5)] [model GB (0.4)]
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "bench/bench_support.hpp"
#include "model_loader/architecture_registry.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;
using bench::since;
using nlohmann::json;

namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;
constexpr int kDecodeTokens = 32;

// Tokens/s of one greedy generate of kDecodeTokens (prefill of 8 included, as a user sees it).
double decode_rate(trainer_sdk::ZmqWeightSyncClient& client) {
  const json body = {{"prompt_token_ids", {1, 2, 3, 4, 5, 6, 7, 8}},
                     {"max_tokens", kDecodeTokens},
                     {"ignore_eos", true},
                     {"temperature", 0}};
  auto t = Clock::now();
  client.call("generate", body);
  return kDecodeTokens / since(t);
}

// Seconds of the second of two full rounds over gloo into a worker of `ranks` rank processes.
double sync_seconds(const Tensors& tensors,
                    const std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>& client, int ranks) {
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 1 + ranks, 0);
  info.packed_buffer_size_bytes = 64ll << 20;
  info.timeout = std::chrono::seconds(300);
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
      info, client, std::make_shared<trainer_sdk::TensorListSource>(tensors));
  engine->send_weights();  // faults in the shadows and the buffers
  auto t = Clock::now();
  engine->send_weights();
  double seconds = since(t);
  engine->shutdown();
  return seconds;
}

// Bytes of the runtime tensors rank `rank` of `size` keeps.
std::uint64_t kept_bytes(const model_loader::ModelConfig& config, int rank, int size) {
  auto mapping = model_loader::ArchitectureRegistry::builtin()
                     .find(config.architecture_name())
                     .weight_mapping(config, {rank, size});
  std::uint64_t bytes = 0;
  for (const auto& p : mapping.runtime_params()) {
    std::uint64_t n = protocol::item_size(config.torch_dtype);
    for (auto d : p.shape)
      n *= static_cast<std::uint64_t>(d);
    bytes += n;
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int repetitions = argc > 1 ? std::stoi(argv[1]) : 5;
    const double gigabytes = argc > 2 ? std::stod(argv[2]) : 0.4;
    fs::path work =
        fs::temp_directory_path() / ("hotswap-tensor-parallel-bench-" + std::to_string(::getpid()));
    const auto config = bench::llama_of_size(gigabytes);
    model_loader::SyntheticCheckpointOptions options;
    options.seed = 1;
    const std::uint64_t bytes =
        model_loader::write_synthetic_checkpoint(work / "model", config, options);
    auto checkpoint = model_loader::Checkpoint::open(work / "model");
    Tensors tensors;
    for (const auto& name : checkpoint.names())
      tensors.emplace_back(name, checkpoint.tensor(name).clone().add_(1));

    auto start = [&](int tp) {
      auto p = std::make_unique<transport::ChildProcess>(
          bench::worker_binary(),
          std::vector<std::string>{"--model", (work / "model").string(), "--control",
                                   "tcp://127.0.0.1:*", "--weight-transfer-config",
                                   R"({"backend": "gloo"})", "--timeout", "300",
                                   "--tensor-parallel-size", std::to_string(tp)});
      return p;
    };
    auto one = start(1), two = start(2);
    auto c1 = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(
        worker::wait_until_ready(*one, std::chrono::seconds(300)), std::chrono::seconds(300));
    auto c2 = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(
        worker::wait_until_ready(*two, std::chrono::seconds(300)), std::chrono::seconds(300));
    decode_rate(*c1);  // warm-up: first-touch of the weights and caches
    decode_rate(*c2);

    std::vector<double> decode1, decode2, sync1, sync2;
    for (int i = 0; i < repetitions; ++i) {
      decode1.push_back(decode_rate(*c1));
      decode2.push_back(decode_rate(*c2));
      sync1.push_back(sync_seconds(tensors, c1, 1));
      sync2.push_back(sync_seconds(tensors, c2, 2));
    }
    const std::string size = std::to_string(bytes / 1000000) + " MB bf16 Llama";
    bench::report_against_limit("tensor_parallel", size + ": decode at tp=2 (tp=1 as limit)",
                                decode2, decode1, "tok/s", "tp2_over_tp1", false,
                                {{"bytes", bytes}, {"tokens", kDecodeTokens}});
    bench::report_against_limit("tensor_parallel",
                                size + ": full gloo sync at tp=2 (tp=1 as limit)", sync2, sync1,
                                "s", "tp1_time_over_tp2_time", true, {{"bytes", bytes}});
    for (int rank = 0; rank < 2; ++rank) {
      const std::uint64_t kept = kept_bytes(config, rank, 2);
      bench::report("tensor_parallel",
                    size + ": tp=2 rank " + std::to_string(rank) + " keeps of what it receives",
                    static_cast<double>(kept) / static_cast<double>(bytes), "fraction",
                    {{"received_bytes", bytes}, {"kept_bytes", kept}});
    }
    one->stop();
    two->stop();
    fs::remove_all(work);
  } catch (const std::exception& e) {
    std::cerr << "hotswap_tensor_parallel_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
