// A full sync of a mixture of experts over gloo from one trainer rank that holds everything,
// against two trainer ranks that each hold half of every layer's experts (expert parallelism)
// and send what they hold, into one real hotswap-worker, in the same run. Each repetition runs
// both, one after the other (a warm-up round, then the timed one), so both see the same machine;
// figures are the median of the repetitions with their range, and the ratio of the medians.
//
// On loopback every broadcast reaches every other rank of the group, the second trainer rank
// included, so two senders move each byte to one more receiver than one sender does: the
// figure to expect on one host is close to 1x, and the gain is on hosts where each trainer rank
// has a link of its own and holds only its share in memory.
//
// Usage: hotswap_many_senders_bench [repetitions (5)]
#include <unistd.h>

#include <filesystem>
#include <future>
#include <iostream>
#include <map>

#include "bench/bench_support.hpp"
#include "model_loader/architecture_registry.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/shard_plan.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;
using bench::since;

namespace {

// A Qwen3-MoE of about 390 MB in bfloat16: 16 experts in each of 4 layers.
model_loader::ModelConfig moe_config() {
  return model_loader::ModelConfig::from_json({
      {"architectures",
       {model_loader::ArchitectureRegistry::builtin().find_by_model_type("qwen3_moe").name}},
      {"hidden_size", 1024},
      {"intermediate_size", 1024},
      {"moe_intermediate_size", 768},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 4},
      {"head_dim", 128},
      {"vocab_size", 16000},
      {"num_experts", 16},
      {"num_experts_per_tok", 4},
      {"torch_dtype", "bfloat16"},
  });
}

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;

// What trainer rank `rank` of `ranks` holds of `tensors`: the whole model's metadata, its share.
std::shared_ptr<trainer_sdk::WeightSource> share_of(const Tensors& tensors, int rank, int ranks) {
  if (ranks == 1) return std::make_shared<trainer_sdk::TensorListSource>(tensors);
  std::vector<std::string> names;
  std::vector<protocol::ParamMeta> meta;
  for (const auto& [name, t] : tensors) {
    names.push_back(name);
    meta.push_back(trainer_sdk::param_meta_of(name, t));
  }
  auto held = trainer_sdk::held_by_rank(names, trainer_sdk::ShardBy::kExperts, rank, ranks);
  std::map<std::string, at::Tensor> mine;
  for (const auto& [name, t] : tensors) {
    if (held.contains(name)) mine.emplace(name, t);
  }
  return std::make_shared<trainer_sdk::TensorListSource>(std::move(meta), std::move(mine));
}

// Seconds of the second of two rounds with `ranks` sending trainer ranks (threads here).
double timed_sync(const Tensors& tensors, const std::string& endpoint, int ranks) {
  const int port = transport::pick_free_port();
  const auto timeout = std::chrono::seconds(300);
  std::vector<std::future<double>> running;
  for (int rank = 0; rank < ranks; ++rank) {
    running.push_back(std::async(std::launch::async, [&, rank] {
      auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, timeout);
      trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", port, ranks + 1, rank);
      info.trainer_ranks = ranks;
      info.packed_buffer_size_bytes = 64ll << 20;
      info.timeout = timeout;
      auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
          info, client, share_of(tensors, rank, ranks));
      engine->send_weights();  // faults in the worker's shadow and the buffers
      auto t = Clock::now();
      engine->send_weights();
      double seconds = since(t);
      engine->shutdown();
      return seconds;
    }));
  }
  double rank_zero = 0;
  for (std::size_t r = 0; r < running.size(); ++r) {
    double s = running[r].get();
    if (r == 0) rank_zero = s;  // rank 0 returns once the worker committed: the sync's time
  }
  return rank_zero;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const int repetitions = argc > 1 ? std::stoi(argv[1]) : 5;
    fs::path work =
        fs::temp_directory_path() / ("hotswap-many-senders-bench-" + std::to_string(::getpid()));
    model_loader::SyntheticCheckpointOptions options;
    options.seed = 1;
    const std::uint64_t bytes =
        model_loader::write_synthetic_checkpoint(work / "model", moe_config(), options);
    auto checkpoint = model_loader::Checkpoint::open(work / "model");
    Tensors tensors;
    for (const auto& name : checkpoint.names())
      tensors.emplace_back(name, checkpoint.tensor(name).clone().add_(1));

    transport::ChildProcess worker(
        bench::worker_binary(),
        {"--model", (work / "model").string(), "--control", "tcp://127.0.0.1:*",
         "--weight-transfer-config", R"({"backend": "gloo"})", "--timeout", "300"});
    const std::string endpoint = worker::wait_until_ready(worker, std::chrono::seconds(120));
    std::vector<double> one, two;
    for (int i = 0; i < repetitions; ++i) {
      one.push_back(bytes / timed_sync(tensors, endpoint, 1) / 1e9);
      two.push_back(bytes / timed_sync(tensors, endpoint, 2) / 1e9);
    }
    const auto a = bench::spread_of(one), b = bench::spread_of(two);
    const std::string size = std::to_string(bytes / 1000000) + " MB MoE";
    bench::report("many_senders", size + ": full sync over gloo, 1 sender", a.median, "GB/s",
                  {{"spread", a.to_json()}, {"bytes", bytes}, {"repetitions", repetitions}});
    bench::report("many_senders", size + ": full sync over gloo, 2 senders (experts)", b.median,
                  "GB/s",
                  {{"spread", b.to_json()},
                   {"bytes", bytes},
                   {"repetitions", repetitions},
                   {"ratio_to_one_sender", b.median / a.median}});
    std::printf("spread: 1 sender %.3f-%.3f, 2 senders %.3f-%.3f GB/s; 2 senders / 1 = %.2fx\n",
                a.low, a.high, b.low, b.high, b.median / a.median);
    worker.stop();
    fs::remove_all(work);
  } catch (const std::exception& e) {
    std::cerr << "hotswap_many_senders_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
