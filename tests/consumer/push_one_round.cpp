// push_one_round CHECKPOINT ENDPOINT: one verified shm round of CHECKPOINT's tensors, plus one.
#include <ATen/TensorOperators.h>

#include <iostream>

#include <hotswap/model_loader/checkpoint.hpp>
#include <hotswap/trainer_sdk/shm_trainer_engine.hpp>
#include <hotswap/trainer_sdk/tensor_list_source.hpp>
#include <hotswap/trainer_sdk/zmq_weight_sync_client.hpp>

using namespace hotswap;

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  auto checkpoint = model_loader::Checkpoint::open(argv[1]);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& name : checkpoint.names())
    tensors.emplace_back(name, checkpoint.tensor(name) + 1);
  auto client =
      std::make_shared<trainer_sdk::ZmqWeightSyncClient>(argv[2], std::chrono::seconds(60));
  auto source = std::make_shared<trainer_sdk::TensorListSource>(std::move(tensors));
  auto engine = trainer_sdk::ShmTrainerEngine::trainer_init({1, 0}, client, source);
  engine->push({"consumer-1", /*verify=*/true});
  std::cout << "pushed and verified: " << client->call("weight_info").dump() << "\n";
}
