// The GPU data planes end to end, between this test process (the trainer) and real
// hotswap-worker processes on GPUs: ipc on one GPU; nccl and sparse_nccl from GPU 0 to a worker
// on GPU 1. A suite whose GPUs are missing exits with 77, which CTest reports as skipped, after
// a line that says what it needed (scripts/gpu-check.sh runs them where there are GPUs).
#include <boost/test/unit_test.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/full.h>

#include <cstdio>
#include <cstdlib>

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
    if (gpu.device_count < kGpus) {
      std::printf("SKIPPED: %s needs %d GPU(s); this machine has %d%s%s\n",
                  boost::unit_test::framework::current_test_case().full_name().c_str(), kGpus,
                  gpu.device_count, gpu.device_error.empty() ? "" : ": ", gpu.device_error.c_str());
      std::fflush(stdout);
      std::exit(77);
    }
  }
};

struct Models {
  model_loader::ModelConfig config =
      testing::tiny_config(model_loader::Architecture::kLlama, protocol::DType::kBFloat16);
  CheckpointDir old_ckpt{config, 6100};
  CheckpointDir new_ckpt{config, 6200};

  // The new checkpoint's tensors on `device`, as a trainer holds them.
  std::vector<std::pair<std::string, at::Tensor>> on(int device) const {
    std::vector<std::pair<std::string, at::Tensor>> out;
    for (auto& [name, t] : new_ckpt.tensors())
      out.emplace_back(name, t.to(c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(device))));
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

}  // namespace

BOOST_FIXTURE_TEST_SUITE(ipc_gpu, OneGpu)

BOOST_AUTO_TEST_CASE(a_colocated_trainer_pushes_verified_rounds_unpacked_and_packed) {
  auto w = worker("ipc", 0);
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 120s);
  auto tensors = on(0);
  auto source = std::make_shared<trainer_sdk::TensorListSource>(tensors);
  {
    trainer_sdk::IpcTrainerInitInfo info(0);
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
    engine->push({"ipc-unpacked", true});
    for (auto& [name, t] : tensors)
      t.mul_(0.5);
    engine->push({"ipc-unpacked-2", true});
  }
  trainer_sdk::IpcTrainerInitInfo info(0);
  info.packed = true;
  info.packed_buffer_size_bytes = 8192;  // many chunks through one reused buffer
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source);
  engine->push({"ipc-packed", true});
  BOOST_TEST(client->call("weight_info")["weight_version"] == "ipc-packed");
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
