// The GPU paths end to end: generation on cuda:0 against the CPU's, in process and in a real
// hotswap-worker; the data planes between this test process (the trainer) and real
// hotswap-worker processes on GPUs: ipc on one GPU; nccl and sparse_nccl from GPU 0 to a worker
// on GPU 1; nccl from GPU 2 to a tensor-parallel worker on GPUs 0 and 1.
//
// One suite per GPU count, since CTest runs a suite as one test: generation_gpu and ipc_gpu need
// 1, nccl_gpu and tensor_parallel_gpu 2, nccl_gpu_three 3. A suite whose GPUs are missing exits
// with 77 at its first case, which CTest reports as skipped, after a line that says what it
// needed and what it found; a suite that mixed counts would hide the smaller cases' results
// behind the skip of the larger (scripts/gpu-check.sh runs them where there are GPUs).
//
// Every round pushes values no earlier round pushed (the trainer's tensors move by one between
// rounds), is verified digest for digest against the trainer's tensors, and must change every
// tensor's digest on the worker: a round that moves no bytes leaves the worker on the round
// before's values and fails. The ipc model is large enough (620 MB, 256 MB chunks) that a chunk
// whose copy had not finished when its handle left would be read half-written.
#include <boost/test/unit_test.hpp>

#include <ATen/Context.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <cmath>
#include <map>
#include <string>

#include "model_loader/generation.hpp"
#include "model_loader/model_test_support.hpp"
#include "needs_gpus.hpp"
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
using testing::NeedsGpus;
using testing::WorkerProcess;

namespace {

using Tensors = std::vector<std::pair<std::string, at::Tensor>>;
using Digests = std::map<std::string, std::string>;

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
  Tensors on(int device) const {
    Tensors out;
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

struct TwoGpus : NeedsGpus<2>, Models {};
struct ThreeGpus : NeedsGpus<3>, Models {};
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

// What the worker holds: its checkpoint-format SHA-256 digests, by Hugging Face name.
Digests held_by(trainer_sdk::WeightSyncClient& client) {
  auto workers = client.checkpoint_checksums();
  BOOST_REQUIRE_EQUAL(workers.size(), 1u);
  return workers.front().second;
}

// Moves every element by one: the next round's values, which no round before it pushed.
void next_round_values(Tensors& tensors) {
  for (auto& [name, t] : tensors)
    t.add_(1);
}

// One round, verified (the worker then holds exactly the trainer's tensors, digest for digest),
// that must have changed the digest of every tensor the worker held before it (`last`, updated).
// Verification alone cannot tell a round that moved nothing from one whose values were the
// same as the round before's; this check makes sure the values were new, so it could.
void push_new_values(trainer_sdk::TrainerWeightTransferEngine& engine,
                     trainer_sdk::ZmqWeightSyncClient& client, const std::string& version,
                     Digests& last) {
  engine.push({version, /*verify=*/true});
  BOOST_TEST(client.call("weight_info")["weight_version"] == version);
  Digests now = held_by(client);
  BOOST_TEST(now.size() == last.size());
  for (const auto& [name, digest] : now) {
    const auto before = last.find(name);
    BOOST_TEST((before != last.end() && before->second != digest),
               "round " + version + " left " + name + " as it was");
  }
  last = std::move(now);
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
  Digests last = held_by(*client);  // the old checkpoint's
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
    push_new_values(*engine, *client, "ipc-unpacked", last);
    change(0.5);
    push_new_values(*engine, *client, "ipc-unpacked-2", last);
  }
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.packed = true;
  info.packed_buffer_size_bytes = 256ll << 20;  // three chunks through one reused buffer
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
  change(-1);
  push_new_values(*engine, *client, "ipc-packed", last);
  change(0.5);
  push_new_values(*engine, *client, "ipc-packed-2", last);
  // The worker on the GPU serves the weights it received.
  auto reply = client->call("generate", {{"prompt_token_ids", kPrompts[0]}, {"max_tokens", 4}});
  BOOST_TEST(reply["token_ids"].size() == 4u);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_FIXTURE_TEST_SUITE(nccl_gpu, TwoGpus)

BOOST_AUTO_TEST_CASE(gpu_0_pushes_four_changing_verified_rounds_to_gpu_1_in_both_rendezvous_modes) {
  auto w = worker("nccl", 1);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 120s);
  Digests last = held_by(*client);  // the old checkpoint's
  auto tensors = on(0);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
  for (bool unique_id : {false, true}) {
    for (bool packed : {true, false}) {
      trainer_sdk::NcclTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
      info.use_unique_id = unique_id;
      info.packed = packed;
      info.packed_buffer_size_bytes = 4096;
      info.timeout = 60s;
      auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
      push_new_values(*engine, *client,
                      std::string(unique_id ? "uid" : "tcp") + (packed ? "-packed" : ""), last);
      engine->shutdown();
      next_round_values(tensors);
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
BOOST_FIXTURE_TEST_SUITE(tensor_parallel_gpu, NeedsGpus<2>)

BOOST_AUTO_TEST_CASE(a_tp_2_worker_on_cuda_0_and_1_generates_what_tp_1_does) {
  CheckpointDir ckpt(testing::tiny_config(model_loader::architectures::kQwen3), 33);
  const std::vector<std::string> on_cuda_0 = {
      "--model", ckpt.dir.path.string(), "--device", "cuda:0", "--timeout", "60"};
  auto tp_2 = on_cuda_0;
  tp_2.insert(tp_2.end(), {"--tensor-parallel-size", "2"});
  expect_same_generation(on_cuda_0, tp_2, 1e-3);
}

BOOST_AUTO_TEST_SUITE_END()

// The trainer on cuda:2, the worker's ranks on cuda:0 and cuda:1: an NCCL group of 3 devices.
BOOST_FIXTURE_TEST_SUITE(nccl_gpu_three, ThreeGpus)

BOOST_AUTO_TEST_CASE(changing_verified_nccl_rounds_reach_both_ranks_of_a_tp_2_worker) {
  WorkerProcess w(
      {"--model", old_ckpt.dir.path.string(), "--device", "cuda:0", "--tensor-parallel-size", "2",
       "--weight-transfer-config", R"({"backend": "nccl"})", "--timeout", "60"},
      120s);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w.endpoint(), 120s);
  Digests last = held_by(*client);  // the old checkpoint's
  auto tensors = on(2);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
  for (bool packed : {true, false}) {
    trainer_sdk::NcclTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
    info.device = 2;
    info.packed = packed;
    info.packed_buffer_size_bytes = 4096;
    info.timeout = 60s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
    push_new_values(*engine, *client, packed ? "tp-packed" : "tp-unpacked", last);
    engine->shutdown();
    next_round_values(tensors);
  }
}

BOOST_AUTO_TEST_SUITE_END()
