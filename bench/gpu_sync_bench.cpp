// hotswap-gpu-bench (GPU builds): full syncs over the GPU data planes, end to end (the
// trainer's send_weights start → the worker's commit, second round), next to the GPU's own
// limits measured in the same run:
//
//   ipc   a synthetic bf16 model (16 GB by default, --gb X) from this process's GPU 0 into a
//         worker process on the same GPU, against one device-to-device copy of the same bytes
//         (target: within 2× its time). Each round (--reps N, 3 by default, after a warm-up
//         round) follows a copy of its own: the figure is the median with its range;
//   decode  generation of that model on cuda:0 in this process, on its default step path (the
//         GPU kernels and decode graphs): greedy tokens/s at batch 1, 8, 64 and 256 (median of
//         --reps runs of 64 new tokens each, with the range), batch 1's token time against the
//         time to read the weights once (target: within 2x), batch 64 over batch 1 (target:
//         20x), the prefill and time to first token of a 1024-token prompt; and libtorch's path
//         at batch 1 and 8 beside it;
//   nccl  with two GPUs, packed, from GPU 0 into a worker on GPU 1, against a raw ncclBroadcast
//         of the same bytes between the same GPUs (target: ≥ 0.9×). One GPU: a skip line.
//
// Prints a table and one JSON line per measurement.
#include <cuda_runtime_api.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <cstring>
#include <functional>
#include <map>
#include <thread>
#include <utility>

#include "bench/bench_support.hpp"
#include "bench/round_split.hpp"
#include "model_loader/checkpoint.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/servable_model.hpp"
#include "model_loader/synthetic_checkpoint.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/cuda_check.hpp"
#include "transport/cuda_ipc.hpp"
#include "transport/cuda_stream.hpp"
#include "transport/device.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/nccl_communicator.hpp"
#include "worker/worker_ready.hpp"

using namespace hotswap;
namespace fs = std::filesystem;
using bench::Clock;
using bench::since;

namespace {

// One device-to-device copy of the model's bytes on GPU 0, the limit a sync is held against.
class DeviceCopy {
 public:
  explicit DeviceCopy(std::size_t bytes) : from_(bytes, 0), to_(bytes, 0) {
    HOTSWAP_CUDA_CHECK(cudaMemset(from_.data(), 1, bytes));
    seconds();  // warm-up
  }
  // From an idle device to the copy's end: the device is synchronized before the clock starts,
  // so no earlier work is counted in.
  double seconds() {
    HOTSWAP_CUDA_CHECK(cudaDeviceSynchronize());
    auto t = Clock::now();
    transport::copy_device_bytes(to_.data(), from_.data(), from_.size(), cudaStreamLegacy);
    HOTSWAP_CUDA_CHECK(cudaDeviceSynchronize());
    return since(t);
  }

 private:
  transport::DeviceBuffer from_, to_;
};

// A raw ncclBroadcast of `bytes` from GPU 0 to GPU 1, two ranks in two threads of this process.
double raw_nccl_seconds(std::size_t bytes) {
  const auto id = transport::new_nccl_unique_id();
  double seconds = 0;
  auto rank = [&](int r) {
    transport::NcclCommunicator comm({id, r, 2, r, std::chrono::seconds(120)});
    at::Tensor buffer = at::empty({static_cast<std::int64_t>(bytes)},
                                  at::TensorOptions().dtype(at::kByte).device(
                                      c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(r))));
    comm.broadcast(buffer, 0, std::chrono::seconds(120));  // warm
    at::Tensor one = at::zeros({1}, buffer.options().dtype(at::kFloat));
    comm.all_reduce_sum(one, std::chrono::seconds(120));
    auto t = Clock::now();
    comm.broadcast(buffer, 0, std::chrono::seconds(120));
    if (r == 0) seconds = since(t);
  };
  std::thread peer(rank, 1);
  rank(0);
  peer.join();
  return seconds;
}

// Generation of the model on cuda:0 in this process, over one step path (`backend`): the model
// loaded once, each figure the median of `reps` runs after a warm-up (which captures the decode
// graphs a batch size needs).
class DecodeBench {
 public:
  DecodeBench(const fs::path& model_dir, model_loader::AttentionBackend backend) {
    model_loader::ModelOptions options;
    options.device = c10::Device(c10::kCUDA, 0);
    options.step_kernels.backend = backend;
    model_ = model_loader::load_model(model_dir, options);
  }
  const model_loader::ServableModel& model() const { return *model_; }

  // Greedy decode: `batch` prompts of 16 tokens, 64 new tokens each, timed from submission to
  // the last token (the CPU samples each step, as the worker does). Tokens/s.
  std::vector<double> decode(int batch, int reps) {
    auto prompts = prompts_of(batch, 16);
    run(prompts, 4);  // warm-up: kernels, allocator, this size's graph
    std::vector<double> rates;
    for (int i = 0; i < reps; ++i)
      rates.push_back(batch * 64.0 / run(prompts, 64));
    return rates;
  }
  // One prompt of `tokens` tokens and its first new token: the prefill, as a request's time to
  // first token. Seconds.
  std::vector<double> first_token(int tokens, int reps) {
    auto prompts = prompts_of(1, tokens);
    run(prompts, 1);
    std::vector<double> seconds;
    for (int i = 0; i < reps; ++i)
      seconds.push_back(run(prompts, 1));
    return seconds;
  }

 private:
  static std::vector<std::vector<std::int64_t>> prompts_of(int batch, int tokens) {
    std::vector<std::vector<std::int64_t>> prompts(static_cast<std::size_t>(batch));
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < tokens; ++t)
        prompts[static_cast<std::size_t>(b)].push_back((b * 131 + t * 17) % 1000 + 1);
    return prompts;
  }
  double run(const std::vector<std::vector<std::int64_t>>& prompts, std::int64_t new_tokens) {
    model_loader::SamplingParams greedy;
    greedy.temperature = 0;
    greedy.max_tokens = new_tokens;
    HOTSWAP_CUDA_CHECK(cudaDeviceSynchronize());
    auto t = Clock::now();
    model_loader::generate(*model_, prompts, greedy);
    return since(t);
  }
  std::shared_ptr<model_loader::ServableModel> model_;
};

// Rollout figures on cuda:0, on the default step path (the kernels where they run the model):
// tokens/s at batch 1, 8, 64 and 256; batch 1's time per token against the time to read the
// model's bytes once (half of one device-to-device copy of them, which reads and writes each
// byte: the decode's limit at batch 1, measured beside it); batch 64 over batch 1; prefill
// tokens/s and the time to first token of a 1024-token prompt. Then libtorch's path at batch 1
// and 8, and its token time against the same limit.
void report_decode(const std::string& size, const fs::path& model_dir, std::uint64_t bytes,
                   int reps) {
  using model_loader::AttentionBackend;
  for (auto backend : {AttentionBackend::kAuto, AttentionBackend::kTorch}) {
    DecodeBench bench_run(model_dir, backend);
    const std::string path = bench_run.model().step_path();
    const std::string prefix = "model " + size + " on cuda:0, " +
                               (backend == AttentionBackend::kAuto ? "default path" : "libtorch");
    if (!bench::json_only()) std::printf("%s: steps: %s\n", prefix.c_str(), path.c_str());
    // libtorch's path at batch 1 and 8 only, beside the kernels': it is the slow one, and the
    // check's time is short.
    const bool kernels = backend == AttentionBackend::kAuto;
    const std::vector<int> batches =
        kernels ? std::vector<int>{1, 8, 64, 256} : std::vector<int>{1, 8};
    std::map<int, double> median;
    for (int batch : batches) {
      const auto rates = bench_run.decode(batch, reps);
      median[batch] = bench::spread_of(rates).median;
      bench::report_spread("gpu_decode", prefix + ": greedy decode, batch " + std::to_string(batch),
                           rates, "tokens/s", {{"reps", reps}, {"step_path", path}});
    }
    DeviceCopy copy(bytes);
    std::vector<double> reads;
    for (int i = 0; i < reps; ++i)
      reads.push_back(copy.seconds() / 2);
    const double read = bench::spread_of(reads).median;
    bench::report(
        "gpu_decode", prefix + ": batch-1 token time / weight-read time", (1.0 / median[1]) / read,
        "x", {{"weight_read_ms", read * 1e3}, {"token_ms", 1e3 / median[1]}, {"target", "<= 2"}});
    if (!kernels) continue;
    bench::report("gpu_decode", prefix + ": batch 64 / batch 1 tokens/s", median[64] / median[1],
                  "x", {{"target", ">= 20"}});
    const auto first = bench_run.first_token(1024, reps);
    std::vector<double> prefill;
    for (double s : first)
      prefill.push_back(1024 / s);
    bench::report_spread("gpu_decode", prefix + ": prefill of 1024 tokens", prefill, "tokens/s");
    std::vector<double> ttft;
    for (double s : first)
      ttft.push_back(s * 1e3);
    bench::report_spread("gpu_decode", prefix + ": time to first token, 1024-token prompt", ttft,
                         "ms");
  }
}

struct Run {
  std::uint64_t bytes;
  std::string size;
  fs::path model;
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // on GPU 0
};

// Full syncs into one worker process: a warm-up round, then `reps` timed rounds, each after a
// call of `between` (the limit measured next to it). For ipc, reports where the rounds' time went,
// each line named by `backend` and `what` (", packed").
std::vector<double> sync_seconds(
    const Run& run, const std::string& backend, const std::string& what, int worker_gpu, int reps,
    const std::function<void()>& between,
    const std::function<std::unique_ptr<trainer_sdk::TrainerWeightTransferEngine>(
        std::shared_ptr<trainer_sdk::WeightSyncClient>,
        std::shared_ptr<trainer_sdk::WeightSource>)>& make_engine) {
  transport::ChildProcess worker(
      bench::worker_binary(),
      {"--model", run.model.string(), "--device", "cuda:" + std::to_string(worker_gpu), "--control",
       "tcp://127.0.0.1:*", "--weight-transfer-config", "{\"backend\": \"" + backend + "\"}",
       "--timeout", "600"});
  std::string endpoint = worker::wait_until_ready(worker, std::chrono::seconds(600));
  auto client = std::make_shared<bench::TimedClient>(
      std::make_shared<trainer_sdk::ZmqWeightSyncClient>(endpoint, std::chrono::seconds(600)));
  auto engine = make_engine(client, std::make_shared<trainer_sdk::TensorListSource>(run.tensors));
  engine->send_weights();
  std::vector<double> seconds;
  bench::RoundSplit split;
  for (int i = 0; i < reps; ++i) {
    between();
    HOTSWAP_CUDA_CHECK(cudaDeviceSynchronize());
    client->take();
    auto t = Clock::now();
    engine->send_weights();
    seconds.push_back(since(t));
    split.add(*client, seconds.back());
  }
  // Where a round's time goes, as the trainer sees it. Not for the broadcast engines, whose
  // update call overlaps their own work.
  if (backend == "ipc") split.report("gpu_sync", "model " + run.size + ": " + backend + what);
  engine->shutdown();
  worker.stop();
  return seconds;
}

}  // namespace

int run(int argc, char** argv) {
  double gb = 16.0;
  int reps = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--gb") gb = std::stod(argv[i + 1]);
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::stoi(argv[i + 1]));
  }
  const auto gpu = transport::gpu_runtime_info();
  if (gpu.device_count == 0) {
    std::printf("SKIPPED: hotswap-gpu-bench needs a GPU (%s)\n", gpu.device_error.c_str());
    return 0;
  }
  fs::path work = fs::temp_directory_path() / ("hotswap-gpu-bench-" + std::to_string(::getpid()));
  Run run;
  model_loader::SyntheticCheckpointOptions options;
  options.seed = 1;
  run.model = work / "model";
  run.bytes =
      model_loader::write_synthetic_checkpoint(run.model, bench::llama_of_size(gb), options);
  run.size = std::to_string(run.bytes / 1000000) + " MB";
  {
    auto checkpoint = model_loader::Checkpoint::open(run.model);
    for (const auto& name : checkpoint.names())
      run.tensors.emplace_back(name,
                               checkpoint.tensor(name).to(c10::Device(c10::kCUDA, 0)).add_(1));
  }

  auto rates = [&](const std::vector<double>& seconds) {
    std::vector<double> out;
    for (double s : seconds)
      out.push_back(run.bytes / s / 1e9);
    return out;
  };
  report_decode(run.size, run.model, run.bytes, reps);
  DeviceCopy copy(run.bytes);
  for (bool packed : {false, true}) {
    std::vector<double> limit;
    auto seconds = sync_seconds(
        run, "ipc", packed ? ", packed" : "", 0, reps, [&] { limit.push_back(copy.seconds()); },
        [&](auto client, auto source) {
          trainer_sdk::IpcTrainerInitInfo info(0);
          info.packed = packed;
          info.packed_buffer_size_bytes = 1ll << 30;
          return trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
        });
    std::vector<double> ratios;
    for (std::size_t i = 0; i < seconds.size(); ++i)
      ratios.push_back(seconds[i] / limit[i]);
    const auto copies = bench::spread_of(rates(limit)), syncs = bench::spread_of(rates(seconds));
    const auto ratio = bench::spread_of(ratios);
    const std::string mode = packed ? ", packed" : "";
    bench::report("gpu_sync", "model " + run.size + ": one device-to-device copy (limit)" + mode,
                  copies.median, "GB/s", {{"bytes", run.bytes}, {"spread", copies.to_json()}});
    bench::report("gpu_sync", "model " + run.size + ": full sync over ipc" + mode, syncs.median,
                  "GB/s", {{"bytes", run.bytes}, {"spread", syncs.to_json()}});
    bench::report("gpu_sync", "model " + run.size + ": ipc sync time / copy time" + mode,
                  ratio.median, "x",
                  {{"spread", ratio.to_json()}, {"target", "<= 2"}, {"reps", reps}});
  }

  if (gpu.device_count < 2) {
    std::printf("SKIPPED: nccl needs two GPUs; this machine has %d\n", gpu.device_count);
  } else {
    const double raw = raw_nccl_seconds(run.bytes);
    bench::report("gpu_sync", "model " + run.size + ": raw ncclBroadcast GPU 0 → 1 (limit)",
                  run.bytes / raw / 1e9, "GB/s", {{"bytes", run.bytes}});
    double s =
        bench::spread_of(sync_seconds(
                             run, "nccl", ", packed", 1, reps, [] {},
                             [&](auto client, auto source) {
                               trainer_sdk::NcclTrainerInitInfo info(
                                   "127.0.0.1", transport::pick_free_port(), 2, 0);
                               info.timeout = std::chrono::seconds(600);
                               return trainer_sdk::WeightTransferTrainerFactory::trainer_init(
                                   info, client, source);
                             }))
            .median;
    bench::report("gpu_sync", "model " + run.size + ": full sync over nccl, packed",
                  run.bytes / s / 1e9, "GB/s",
                  {{"bytes", run.bytes}, {"ratio_to_raw_nccl", raw / s}});  // target ≥ 0.9
  }
  run.tensors.clear();
  fs::remove_all(work);
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "hotswap-gpu-bench: " << e.what() << "\n";
    return 1;
  }
}
