// The GPU paths end to end: generation on cuda:0 against the CPU's, in process and in a real
// hotswap-worker; the data planes between this test process (the trainer) and real
// hotswap-worker processes on GPUs: ipc on one GPU; nccl and sparse_nccl from GPU 0 to a worker
// on GPU 1. A suite whose GPUs are missing exits with 77, which CTest reports as skipped, after
// a line that says what it needed (scripts/gpu-check.sh runs them where there are GPUs).
//
// Rounds that follow one another push different values (a path that moves nothing fails its
// verification), and the ipc model is large enough (620 MB, 256 MB chunks) that a chunk whose
// copy had not finished when its handle left would be read half-written.
#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "model_loader/generation.hpp"
#include "model_loader/model_test_support.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/ipc_trainer_engine.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/device.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using testing::CheckpointDir;
using testing::WorkerProcess;

namespace {

template <int kGpus>
struct NeedsGpus {
  NeedsGpus() {
    const auto gpu = transport::gpu_runtime_info();
    if (gpu.device_count >= kGpus && !at::hasCUDA()) {
      std::printf("SKIPPED: %s needs a libtorch built with CUDA; this build's is CPU-only\n",
                  boost::unit_test::framework::current_test_case().full_name().c_str());
      std::fflush(stdout);
      std::exit(77);
    }
    if (gpu.device_count < kGpus) {
      std::printf("SKIPPED: %s needs %d GPU(s); this machine has %d%s%s\n",
                  boost::unit_test::framework::current_test_case().full_name().c_str(), kGpus,
                  gpu.device_count, gpu.device_error.empty() ? "" : ": ", gpu.device_error.c_str());
      std::fflush(stdout);
      std::exit(77);
    }
  }
};

// A Llama of about 620 MB in bfloat16.
model_loader::ModelConfig medium_config() {
  auto c = testing::tiny_config(model_loader::architectures::kLlama, protocol::DType::kBFloat16);
  c.hidden_size = 2048;
  c.intermediate_size = 5632;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  c.vocab_size = 32000;
  c.max_position_embeddings = 256;
  return c;
}

struct Models {
  explicit Models(model_loader::ModelConfig c = testing::tiny_config(
                      model_loader::architectures::kLlama, protocol::DType::kBFloat16))
      : config(std::move(c)), old_ckpt(config, 6100) {}
  model_loader::ModelConfig config;
  CheckpointDir old_ckpt;

  // The old checkpoint's tensors made different (+1) on `device`, as a trainer holds them.
  std::vector<std::pair<std::string, at::Tensor>> on(int device) const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (auto& [name, t] : old_ckpt.tensors())
      out.emplace_back(
          name, t.to(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device))).add_(1));
    return out;
  }
  std::unique_ptr<WorkerProcess> worker(const std::string& backend, int device) const {
    return std::make_unique<WorkerProcess>(
        std::vector<std::string>{"--model", old_ckpt.dir.path.string(), "--device",
                                 "cuda:" + std::to_string(device), "--weight-transfer-config",
                                 R"({"backend": ")" + backend + R"("})", "--timeout", "60"},
        120s);
  }
};

struct OneGpu : NeedsGpus<1>, Models {};
struct TwoGpus : NeedsGpus<2>, Models {};
struct MediumModel : NeedsGpus<1>, Models {
  MediumModel() : Models(medium_config()) {}
};

const std::vector<std::vector<std::int64_t>> kPrompts = {{3, 17, 42, 5, 9, 61, 7}, {11, 2, 30}};

// A worker started with `args` generates, greedily with logprobs, the tokens a worker started
// with `reference_args` does, its logprobs within `tolerance`.
void expect_same_generation(const std::vector<std::string>& reference_args,
                            const std::vector<std::string>& args, double tolerance) {
  const nlohmann::json request = {{"prompt_token_ids", kPrompts[0]},
                                  {"max_tokens", 12},
                                  {"temperature", 0},
                                  {"logprobs", true}};
  std::vector<nlohmann::json> replies;
  for (const auto& a : {reference_args, args}) {
    WorkerProcess w(a, 120s);
    trainer_sdk::ZmqWeightSyncClient client(w.endpoint(), 120s);
    replies.push_back(client.call("generate", request));
  }
  BOOST_TEST(replies[1]["token_ids"] == replies[0]["token_ids"]);
  for (std::size_t t = 0; t < replies[0]["logprobs"].size(); ++t) {
    BOOST_TEST(std::abs(replies[1]["logprobs"][t].get<double>() -
                        replies[0]["logprobs"][t].get<double>()) <= tolerance);
  }
}

}  // namespace

BOOST_FIXTURE_TEST_SUITE(generation_gpu, NeedsGpus<1>)

BOOST_AUTO_TEST_CASE(greedy_tokens_and_float32_logprobs_on_cuda_0_equal_the_cpus) {
  model_loader::SamplingParams greedy;
  greedy.max_tokens = 16;
  greedy.temperature = 0;
  // The mixtures of experts too: routing, grouping by expert and the fused experts on the GPU.
  for (auto arch :
       {model_loader::architectures::kLlama, model_loader::architectures::kMistral,
        model_loader::architectures::kQwen2, model_loader::architectures::kQwen3,
        model_loader::architectures::kQwen3Moe, model_loader::architectures::kMixtral}) {
    CheckpointDir ckpt(testing::tiny_config(arch), 31);  // float32
    model_loader::ModelOptions on_gpu;
    on_gpu.device = c10::Device(c10::kCUDA, 0);
    const auto cpu = model_loader::generate(*ckpt.load(), kPrompts, greedy);
    const auto gpu = model_loader::generate(*ckpt.load(on_gpu), kPrompts, greedy);
    for (std::size_t i = 0; i < kPrompts.size(); ++i) {
      BOOST_TEST(gpu[i].token_ids == cpu[i].token_ids, ckpt.config.architecture_name());
      for (std::size_t t = 0; t < cpu[i].logprobs.size(); ++t)
        BOOST_TEST(std::abs(gpu[i].logprobs[t] - cpu[i].logprobs[t]) <= 1e-4);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_worker_on_cuda_0_generates_what_a_worker_on_the_cpu_does) {
  CheckpointDir ckpt(testing::tiny_config(model_loader::architectures::kQwen3), 32);
  expect_same_generation({"--model", ckpt.dir.path.string(), "--device", "cpu"},
                         {"--model", ckpt.dir.path.string(), "--device", "cuda:0"}, 1e-4);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(ipc_gpu, MediumModel)

BOOST_AUTO_TEST_CASE(a_colocated_trainer_pushes_changing_verified_rounds_unpacked_and_packed) {
  auto w = worker("ipc", 0);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 120s);
  auto tensors = on(0);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
  // Each change is queued on the GPU just before the next round reads the tensors.
  auto change = [&](double factor) {
    for (auto& [name, t] : tensors)
      t.mul_(factor);
  };
  {
    trainer_sdk::IpcTrainerInitInfo info(0);
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
    engine->push({"ipc-unpacked", true});
    change(0.5);
    engine->push({"ipc-unpacked-2", true});
  }
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.packed = true;
  info.packed_buffer_size_bytes = 256ll << 20;  // three chunks through one reused buffer
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
  change(-1);
  engine->push({"ipc-packed", true});
  change(0.5);
  engine->push({"ipc-packed-2", true});
  BOOST_TEST(client->call("weight_info")["weight_version"] == "ipc-packed-2");
  // The worker on the GPU serves the weights it received.
  auto reply = client->call("generate", {{"prompt_token_ids", kPrompts[0]}, {"max_tokens", 4}});
  BOOST_TEST(reply["token_ids"].size() == 4u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(nccl_gpu, TwoGpus)

BOOST_AUTO_TEST_CASE(gpu_0_pushes_to_a_worker_on_gpu_1_in_both_rendezvous_modes) {
  auto w = worker("nccl", 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 120s);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(on(0));
  for (bool unique_id : {false, true}) {
    for (bool packed : {true, false}) {
      trainer_sdk::NcclTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
      info.use_unique_id = unique_id;
      info.packed = packed;
      info.packed_buffer_size_bytes = 4096;
      info.timeout = 60s;
      auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
      engine->push({std::string(unique_id ? "uid" : "tcp") + (packed ? "-packed" : ""), true});
      engine->shutdown();
    }
  }
}

BOOST_AUTO_TEST_CASE(sparse_patches_land_on_a_worker_on_gpu_1) {
  auto w = worker("sparse_nccl", 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 120s);
  auto before = client->call("weight_checker", {{"action", "checksum"}});
  trainer_sdk::SparseNcclTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.timeout = 60s;
  auto engine = trainer_sdk::SparseNcclTrainerEngine::trainer_init(info, client, nullptr);
  auto cuda = at::TensorOptions().device(c10::Device(c10::kCUDA, 0));
  const auto shape = config.vocab_size;  // the embedding's rows
  trainer_sdk::SparsePatch patch{"model.embed_tokens.weight",
                                 at::arange(4, cuda.dtype(at::kInt)) * 3,
                                 at::full({4}, 0.25, cuda.dtype(at::kBFloat16)),
                                 {shape, config.hidden_size}};
  engine->send_weights({patch}, "sparse-1");
  BOOST_TEST(client->call("weight_checker", {{"action", "checksum"}}) != before);
  BOOST_TEST(client->call("weight_info")["weight_version"] == "sparse-1");
}

BOOST_AUTO_TEST_SUITE_END()

// Tensor parallelism on GPUs: the ranks' all-reduces run over NCCL (RankCollectives), one
// device per rank.
BOOST_AUTO_TEST_SUITE(tensor_parallel_gpu)

BOOST_FIXTURE_TEST_CASE(a_tp_2_worker_on_cuda_0_and_1_generates_what_tp_1_does, TwoGpus) {
  CheckpointDir ckpt(testing::tiny_config(model_loader::architectures::kQwen3), 33);
  const std::vector<std::string> on_cuda_0 = {
      "--model", ckpt.dir.path.string(), "--device", "cuda:0", "--timeout", "60"};
  auto tp_2 = on_cuda_0;
  tp_2.insert(tp_2.end(), {"--tensor-parallel-size", "2"});
  expect_same_generation(on_cuda_0, tp_2, 1e-3);
}

// The trainer on cuda:2, the worker's ranks on cuda:0 and cuda:1: a group of 3 devices.
BOOST_FIXTURE_TEST_CASE(an_nccl_round_reaches_both_ranks_of_a_tp_2_worker, NeedsGpus<3>) {
  Models models;
  WorkerProcess w(
      {"--model", models.old_ckpt.dir.path.string(), "--device", "cuda:0", "--tensor-parallel-size",
       "2", "--weight-transfer-config", R"({"backend": "nccl"})", "--timeout", "60"},
      120s);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w.endpoint(), 120s);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(models.on(2));
  for (bool packed : {true, false}) {
    trainer_sdk::NcclTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
    info.device = 2;
    info.packed = packed;
    info.packed_buffer_size_bytes = 4096;
    info.timeout = 60s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
    engine->push({packed ? "tp-packed" : "tp-unpacked", /*verify=*/true});
    engine->shutdown();
  }
}

BOOST_AUTO_TEST_SUITE_END()
