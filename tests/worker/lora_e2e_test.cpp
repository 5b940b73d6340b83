// LoRA adapters served by a real worker process with vLLM's interface: --enable-lora,
// --max-loras, --max-lora-rank and --lora-modules; /v1/load_lora_adapter and
// /v1/unload_lora_adapter behind VLLM_ALLOW_RUNTIME_LORA_UPDATING, with vLLM's replies and
// errors; a request's `model` naming an adapter; /v1/models listing adapters with their parent;
// the same over ZeroMQ. Greedy tokens are held against transformers + peft's (golden vectors).
#include <boost/test/unit_test.hpp>

#include <httplib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include <nlohmann/json.hpp>

#include "model_loader/safetensors_file.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/gloo_trainer_init_info.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/rpc_error.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const std::filesystem::path kGolden = HOTSWAP_GOLDEN_DIR;
const std::filesystem::path kModel = kGolden / "model_loader" / "qwen2_f32";
const std::filesystem::path kAdapters = kGolden / "lora" / "qwen2_f32";

json golden_lora() {
  return json::parse(std::ifstream(kAdapters / "golden.json"));
}

std::vector<std::int64_t> greedy_of(const json& golden) {
  std::vector<std::int64_t> tokens;
  for (const auto& step : golden["greedy"])
    tokens.push_back(step["token"].get<std::int64_t>());
  return tokens;
}

// Sets an environment variable for the workers this test starts, and takes it back after.
struct ScopedEnv {
  const char* name;
  ScopedEnv(const char* n, const char* value) : name(n) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name); }
};

struct Worker {
  int port = transport::pick_free_port();
  std::unique_ptr<testing::WorkerProcess> process;

  explicit Worker(const std::vector<std::string>& extra) {
    process = testing::openai_worker(kModel, port, extra);
  }
  httplib::Result post(const std::string& path, const json& body) {
    httplib::Client http("127.0.0.1", port);
    http.set_read_timeout(60s);
    return http.Post(path, body.dump(), "application/json");
  }
  // The greedy continuation of the golden prompt under `model`, as the worker answers it.
  std::vector<std::int64_t> greedy(const std::string& model, std::size_t tokens) {
    auto res = post("/v1/completions", {{"model", model},
                                        {"prompt", golden_lora()["prompt"]},
                                        {"max_tokens", tokens},
                                        {"temperature", 0},
                                        {"return_token_ids", true}});
    BOOST_REQUIRE(res);
    BOOST_REQUIRE_MESSAGE(res->status == 200, res->body);
    const json body = json::parse(res->body);
    BOOST_TEST(body["model"] == model);
    return body["choices"][0]["token_ids"].get<std::vector<std::int64_t>>();
  }
  std::pair<int, std::string> answer(const std::string& path, const json& body) {
    auto res = post(path, body);
    BOOST_REQUIRE(res);
    return {res->status, res->body};
  }
};

// A trainer's source of an adapter's tensors: its PEFT file's, by their saved names.
std::shared_ptr<trainer_sdk::WeightSource> adapter_source(const std::filesystem::path& adapter) {
  auto file = model_loader::SafetensorsFile::open((adapter / "adapter_model.safetensors").string());
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& info : file->tensors())
    tensors.emplace_back(info.name, file->tensor(info).clone());
  return std::make_shared<trainer_sdk::TensorListSource>(std::move(tensors));
}

std::string error_message(const std::string& body) {
  return json::parse(body)["error"]["message"].get<std::string>();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lora_e2e)

BOOST_AUTO_TEST_CASE(adapters_named_at_start_up_serve_by_model_name_with_pefts_tokens) {
  const json golden = golden_lora();
  const json base = json::parse(std::ifstream(kModel / "golden.json"));
  Worker worker({"--enable-lora", "--max-loras", "2", "--lora-modules",
                 "wide=" + (kAdapters / "wide").string(), "--lora-modules",
                 json({{"name", "narrow"},
                       {"path", (kAdapters / "narrow").string()},
                       {"base_model_name", "qwen2-base"}})
                     .dump()});
  BOOST_TEST(worker.greedy("wide", 8) == greedy_of(golden["adapters"]["wide"]),
             boost::test_tools::per_element());
  BOOST_TEST(worker.greedy("narrow", 8) == greedy_of(golden["adapters"]["narrow"]),
             boost::test_tools::per_element());
  BOOST_TEST(worker.greedy("tiny", 8) == greedy_of(base), boost::test_tools::per_element());

  httplib::Client http("127.0.0.1", worker.port);
  auto models = http.Get("/v1/models");
  BOOST_REQUIRE(models);
  const json data = json::parse(models->body)["data"];
  BOOST_REQUIRE(data.size() == 3u);
  BOOST_TEST(data[0]["id"] == "tiny");
  BOOST_TEST(data[1]["id"] == "wide");
  BOOST_TEST(data[1]["parent"] == "tiny");
  BOOST_TEST(data[1]["root"] == (kAdapters / "wide").string());
  BOOST_TEST(data[2]["id"] == "narrow");
  BOOST_TEST(data[2]["parent"] == "qwen2-base");

  // vLLM's vllm:lora_requests_info: the adapters of the requests waiting and running. A paused
  // worker holds a request waiting, where it is seen for sure.
  auto metrics = [&] {
    auto res = http.Get("/metrics");
    BOOST_REQUIRE(res);
    BOOST_TEST(testing::malformed_metric_lines(res->body).empty());
    return res->body;
  };
  BOOST_TEST(metrics().find("vllm:lora_requests_info{max_lora=\"2\",waiting_lora_adapters=\"\","
                            "running_lora_adapters=\"\"} ") != std::string::npos);
  BOOST_REQUIRE(http.Post("/pause?mode=keep", "", "application/json"));
  auto held = std::async(std::launch::async, [&] {
    return worker.answer("/v1/completions",
                         {{"model", "narrow"}, {"prompt", {1, 2, 3}}, {"max_tokens", 4}});
  });
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    seen = metrics().find("waiting_lora_adapters=\"narrow\"") != std::string::npos;
    if (!seen) std::this_thread::sleep_for(10ms);
  }
  BOOST_TEST(seen);
  BOOST_REQUIRE(http.Post("/resume", "{}", "application/json"));
  BOOST_TEST(held.get().first == 200);

  // A name that is neither the model nor an adapter: vLLM's 404.
  auto [status, body] = worker.answer("/v1/completions", {{"model", "other"}, {"prompt", {1, 2}}});
  BOOST_TEST(status == 404);
  BOOST_TEST(error_message(body) == "The model `other` does not exist.");
  // Without VLLM_ALLOW_RUNTIME_LORA_UPDATING the runtime routes refuse, saying how to allow them.
  std::tie(status, body) = worker.answer(
      "/v1/load_lora_adapter", {{"lora_name", "x"}, {"lora_path", (kAdapters / "wide").string()}});
  BOOST_TEST(status == 400);
  BOOST_TEST(error_message(body).find("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(adapters_load_and_unload_at_run_time_with_vllms_replies_and_errors) {
  ScopedEnv allow("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True");
  const json golden = golden_lora();
  Worker worker({"--enable-lora", "--max-loras", "2", "--max-lora-rank", "8"});
  const std::string wide = (kAdapters / "wide").string(), narrow = (kAdapters / "narrow").string();

  auto [status, body] =
      worker.answer("/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", wide}});
  BOOST_TEST(status == 200);
  BOOST_TEST(body == "Success: LoRA adapter 'a' added successfully.");
  BOOST_TEST(worker.greedy("a", 8) == greedy_of(golden["adapters"]["wide"]),
             boost::test_tools::per_element());

  std::tie(status, body) =
      worker.answer("/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", narrow}});
  BOOST_TEST(status == 400);
  BOOST_TEST(error_message(body) == "The lora adapter 'a' has already been loaded.");
  std::tie(status, body) =
      worker.answer("/v1/load_lora_adapter", {{"lora_name", "tiny"}, {"lora_path", narrow}});
  BOOST_TEST(status == 400);
  BOOST_TEST(error_message(body).find("is the served model's name") != std::string::npos);
  std::tie(status, body) = worker.answer("/v1/load_lora_adapter", {{"lora_name", "a"}});
  BOOST_TEST(status == 400);
  BOOST_TEST(error_message(body) == "Both 'lora_name' and 'lora_path' must be provided.");
  std::tie(status, body) = worker.answer("/v1/load_lora_adapter",
                                         {{"lora_name", "b"}, {"lora_path", "/no/such/adapter"}});
  BOOST_TEST(status == 404);
  BOOST_TEST(error_message(body) == "No adapter found for /no/such/adapter");

  // vLLM's load_inplace: the name stays, the adapter is the new one from the next request on.
  std::tie(status, body) = worker.answer(
      "/v1/load_lora_adapter", {{"lora_name", "a"}, {"lora_path", narrow}, {"load_inplace", true}});
  BOOST_TEST(status == 200);
  BOOST_TEST(worker.greedy("a", 8) == greedy_of(golden["adapters"]["narrow"]),
             boost::test_tools::per_element());

  std::tie(status, body) =
      worker.answer("/v1/load_lora_adapter", {{"lora_name", "b"}, {"lora_path", wide}});
  BOOST_TEST(status == 200);
  std::tie(status, body) =
      worker.answer("/v1/load_lora_adapter", {{"lora_name", "c"}, {"lora_path", wide}});
  BOOST_TEST(status == 400);
  BOOST_TEST(error_message(body).find("as many as --max-loras 2 allows") != std::string::npos);

  std::tie(status, body) = worker.answer("/v1/unload_lora_adapter", {{"lora_name", "b"}});
  BOOST_TEST(status == 200);
  BOOST_TEST(body == "Success: LoRA adapter 'b' removed successfully.");
  std::tie(status, body) = worker.answer("/v1/unload_lora_adapter", {{"lora_name", "b"}});
  BOOST_TEST(status == 404);
  BOOST_TEST(error_message(body) == "The lora adapter 'b' cannot be found.");
  std::tie(status, body) = worker.answer("/v1/completions", {{"model", "b"}, {"prompt", {1, 2}}});
  BOOST_TEST(status == 404);

  // An adapter past --max-lora-rank: vLLM's message, nothing served changes.
  testing::TempDir big;
  std::filesystem::copy(kAdapters / "wide", big.path);
  json config = json::parse(std::ifstream(big.path / "adapter_config.json"));
  std::tie(status, body) =
      worker.answer("/v1/load_lora_adapter", {{"lora_name", "b"}, {"lora_path", wide}});
  BOOST_TEST(status == 200);  // rank 8: within --max-lora-rank 8
  worker.answer("/v1/unload_lora_adapter", {{"lora_name", "b"}});
  config["r"] = 16;
  std::ofstream(big.path / "adapter_config.json") << config.dump();
  std::tie(status, body) = worker.answer("/v1/load_lora_adapter",
                                         {{"lora_name", "big"}, {"lora_path", big.path.string()}});
  BOOST_TEST(status == 400);
  BOOST_TEST(error_message(body).find("LoRA rank 16 is greater than max_lora_rank 8.") !=
             std::string::npos);
  BOOST_TEST(worker.greedy("a", 8) == greedy_of(golden["adapters"]["narrow"]),
             boost::test_tools::per_element());

  // The same over ZeroMQ, by the control-method table's names.
  trainer_sdk::RpcClient client(worker.process->endpoint(), 30s);
  const json loaded = client.call("load_lora_adapter", {{"lora_name", "z"}, {"lora_path", wide}});
  BOOST_TEST(loaded["text"] == "Success: LoRA adapter 'z' added successfully.");
  BOOST_TEST(client.call("models", json::object())["data"].size() == 3u);
  auto [code, message] = testing::rpc_error(client, "unload_lora_adapter", {{"lora_name", "q"}});
  BOOST_TEST(code == protocol::kInvalidParamsCode);
  BOOST_TEST(message == "The lora adapter 'q' cannot be found.");
}

// hotswap's extension of the contract: a round that names `lora_name` moves an adapter, not the
// model, and serves it under that name when it finishes whole (here over the disk plane, the
// adapter's PEFT files as the round's checkpoint). The model's weights and version stay as they
// were.
BOOST_AUTO_TEST_CASE(an_adapter_moves_through_the_four_calls) {
  const json golden = golden_lora();
  const json base = json::parse(std::ifstream(kModel / "golden.json"));
  Worker worker(
      {"--enable-lora", "--max-loras", "2", "--weight-transfer-config", R"({"backend": "disk"})"});
  trainer_sdk::RpcClient client(worker.process->endpoint(), 30s);
  const json narrow_config =
      json::parse(std::ifstream(kAdapters / "narrow" / "adapter_config.json"));
  const json wide_config = json::parse(std::ifstream(kAdapters / "wide" / "adapter_config.json"));
  auto round = [&](const json& start, const std::filesystem::path& adapter) {
    client.call("start_weight_update", start);
    client.call("update_weights", {{"update_info", {{"path", adapter.string()}}}});
    client.call("finish_weight_update", {{"weight_version", "adapter-1"}});
  };
  client.call("init_weight_transfer_engine", {{"init_info", json::object()}});
  // A new adapter from the trainer: its config in the start, no file on the worker's disk named.
  // A second start meanwhile is refused and leaves the round's adapter to be served.
  client.call("start_weight_update", {{"lora_name", "policy"}, {"lora_config", narrow_config}});
  const auto nested = testing::rpc_error(client, "start_weight_update", json::object());
  BOOST_TEST(nested.second.find("already active") != std::string::npos, nested.second);
  client.call("update_weights", {{"update_info", {{"path", (kAdapters / "narrow").string()}}}});
  client.call("finish_weight_update", {{"weight_version", "adapter-1"}});
  BOOST_TEST(worker.greedy("policy", 8) == greedy_of(golden["adapters"]["narrow"]),
             boost::test_tools::per_element());
  BOOST_TEST(worker.greedy("tiny", 8) == greedy_of(base), boost::test_tools::per_element());
  BOOST_TEST(client.call("weight_info")["weight_version"] == "default");
  // Replaced whole at a new config; then again at its own (no lora_config).
  round({{"lora_name", "policy"}, {"lora_config", wide_config}}, kAdapters / "wide");
  BOOST_TEST(worker.greedy("policy", 8) == greedy_of(golden["adapters"]["wide"]),
             boost::test_tools::per_element());
  round({{"lora_name", "policy"}}, kAdapters / "wide");
  BOOST_TEST(worker.greedy("policy", 8) == greedy_of(golden["adapters"]["wide"]),
             boost::test_tools::per_element());

  // A round at the served adapter's config that brings another adapter's tensors (rank 4 where
  // it is 8) fails when they arrive; the adapter served stays.
  client.call("start_weight_update", {{"lora_name", "policy"}});
  auto [code, message] = testing::rpc_error(
      client, "update_weights", {{"update_info", {{"path", (kAdapters / "narrow").string()}}}});
  BOOST_TEST(code == protocol::kInvalidParamsCode);
  BOOST_TEST(message.find("at rank 8 needs") != std::string::npos, message);
  BOOST_TEST(worker.greedy("policy", 8) == greedy_of(golden["adapters"]["wide"]),
             boost::test_tools::per_element());
  // A name not served, without its config; the model's own name.
  std::tie(code, message) = testing::rpc_error(client, "start_weight_update", {{"lora_name", "x"}});
  BOOST_TEST(message.find("gives its `lora_config`") != std::string::npos, message);
  std::tie(code, message) = testing::rpc_error(
      client, "start_weight_update", {{"lora_name", "tiny"}, {"lora_config", wide_config}});
  BOOST_TEST(message.find("is the served model's name") != std::string::npos, message);
  // A new adapter within --max-loras 2, then one past it.
  round({{"lora_name", "second"}, {"lora_config", narrow_config}}, kAdapters / "narrow");
  BOOST_TEST(worker.greedy("second", 8) == greedy_of(golden["adapters"]["narrow"]),
             boost::test_tools::per_element());
  std::tie(code, message) = testing::rpc_error(
      client, "start_weight_update", {{"lora_name", "third"}, {"lora_config", narrow_config}});
  BOOST_TEST(message.find("as many as --max-loras 2 allows") != std::string::npos, message);
  // A base-model round still works after adapter rounds, and names its version.
  client.call("start_weight_update");
  client.call("update_weights", {{"update_info", {{"path", kModel.string()}}}});
  client.call("finish_weight_update", {{"weight_version", "step-2"}});
  BOOST_TEST(client.call("weight_info")["weight_version"] == "step-2");
  BOOST_TEST(worker.greedy("tiny", 8) == greedy_of(base), boost::test_tools::per_element());
}

// The trainer SDK pushes an adapter (hotswap's extension of the contract) over the CPU planes a
// trainer beside its workers uses, gloo and shm: each push verified against the worker's digests
// of the adapter, served under its name with its version (weight_info, spans), then replaced at
// another rank by a second push. The model's own weights and version stay.
BOOST_AUTO_TEST_CASE(a_trainer_pushes_an_adapter_over_gloo_and_shm_verified) {
  const json golden = golden_lora();
  for (const std::string backend : {"gloo", "shm"}) {
    BOOST_TEST_CONTEXT(backend) {
      Worker worker(
          {"--enable-lora", "--weight-transfer-config", json({{"backend", backend}}).dump()});
      auto client =
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(worker.process->endpoint(), 30s);
      auto push = [&](const std::string& adapter, const std::string& version) {
        std::unique_ptr<trainer_sdk::TrainerInitInfo> info;
        if (backend == "gloo") {
          auto gloo = std::make_unique<trainer_sdk::GlooTrainerInitInfo>(
              "127.0.0.1", transport::pick_free_port(), 2, 0);
          gloo->timeout = 30s;
          info = std::move(gloo);
        } else {
          auto shm = std::make_unique<trainer_sdk::ShmTrainerInitInfo>(1, 0);
          shm->timeout = 30s;
          info = std::move(shm);
        }
        auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
            *info, client, adapter_source(kAdapters / adapter));
        const json config = json::parse(std::ifstream(kAdapters / adapter / "adapter_config.json"));
        engine->push({version, /*verify=*/true, trainer_sdk::AdapterTarget{"policy", config}});
        engine->shutdown();
      };
      push("wide", "wide-1");
      BOOST_TEST(worker.greedy("policy", 8) == greedy_of(golden["adapters"]["wide"]),
                 boost::test_tools::per_element());
      const json info = client->call("weight_info");
      BOOST_TEST(info["weight_version"] == "default");
      BOOST_TEST(info["lora_versions"] == json({{"policy", "wide-1"}}));
      auto res = worker.post("/v1/completions", {{"model", "policy"},
                                                 {"prompt", {1, 2, 3}},
                                                 {"max_tokens", 3},
                                                 {"return_weight_versions", true}});
      BOOST_REQUIRE(res);
      BOOST_TEST(json::parse(res->body)["choices"][0]["weight_versions"] ==
                 json::parse(R"([{"version": "default", "start": 0, "end": 3,
                                   "lora_version": "wide-1"}])"));

      push("narrow", "narrow-1");  // rank 4 where it was 8: the config in the round says so
      BOOST_TEST(worker.greedy("policy", 8) == greedy_of(golden["adapters"]["narrow"]),
                 boost::test_tools::per_element());
      BOOST_TEST(client->call("weight_info")["lora_versions"]["policy"] == "narrow-1");
      const auto served = client->adapter_checksums("policy");
      BOOST_REQUIRE(served.size() == 1u);
      const json baseline = served[0].second;
      BOOST_TEST(client->call("weight_checker", {{"action", "compare"},
                                                 {"lora_name", "policy"},
                                                 {"baseline", baseline}})["match"] == true);
      json changed = baseline;
      changed.begin().value() = std::string(64, '0');
      BOOST_TEST(client->call("weight_checker", {{"action", "compare"},
                                                 {"lora_name", "policy"},
                                                 {"baseline", changed}})["match"] == false);
      trainer_sdk::RpcClient rpc(worker.process->endpoint(), 30s);
      auto [code, message] = testing::rpc_error(rpc, "weight_checker",
                                                {{"action", "checksum"}, {"lora_name", "nope"}});
      BOOST_TEST(code == protocol::kInvalidParamsCode);
      BOOST_TEST(message == "The lora adapter 'nope' cannot be found.");
    }
  }
}

// Tensor parallelism: each rank holds its own shard of every adapter (sharded as vLLM shards
// it), whether it came from --lora-modules, /v1/load_lora_adapter or a trainer's round (each
// rank staging what the trainer's gloo group broadcast), and concurrent requests through
// different adapters get PEFT's tokens as at tp 1. Adapters unloaded or replaced are let go on
// every rank, and the ones left keep serving.
BOOST_AUTO_TEST_CASE(tensor_parallel_ranks_serve_adapters_from_a_path_and_from_a_round) {
  const json golden = golden_lora();
  const json base = json::parse(std::ifstream(kModel / "golden.json"));
  ScopedEnv env("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True");
  Worker worker({"--tensor-parallel-size", "2", "--enable-lora", "--max-loras", "3",
                 "--lora-modules", "wide=" + (kAdapters / "wide").string(),
                 "--weight-transfer-config", R"({"backend": "gloo"})"});
  const auto wide = greedy_of(golden["adapters"]["wide"]),
             narrow = greedy_of(golden["adapters"]["narrow"]);
  BOOST_TEST(worker.greedy("wide", 8) == wide, boost::test_tools::per_element());
  auto [status, body] =
      worker.answer("/v1/load_lora_adapter",
                    {{"lora_name", "narrow"}, {"lora_path", (kAdapters / "narrow").string()}});
  BOOST_TEST(status == 200, body);
  {  // one batch through both adapters and the base model
    auto a = std::async(std::launch::async, [&] { return worker.greedy("wide", 8); });
    auto b = std::async(std::launch::async, [&] { return worker.greedy("narrow", 8); });
    auto c = std::async(std::launch::async, [&] { return worker.greedy("tiny", 8); });
    BOOST_TEST(a.get() == wide, boost::test_tools::per_element());
    BOOST_TEST(b.get() == narrow, boost::test_tools::per_element());
    BOOST_TEST(c.get() == greedy_of(base), boost::test_tools::per_element());
  }

  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(worker.process->endpoint(), 30s);
  auto push = [&](const std::string& adapter, const std::string& version) {
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
    info.timeout = 30s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
        info, client, adapter_source(kAdapters / adapter));
    const json config = json::parse(std::ifstream(kAdapters / adapter / "adapter_config.json"));
    engine->push({version, /*verify=*/true, trainer_sdk::AdapterTarget{"policy", config}});
    engine->shutdown();
  };
  push("wide", "p-1");
  BOOST_TEST(worker.greedy("policy", 8) == wide, boost::test_tools::per_element());
  {
    // A round that fails at finish on rank 1 alone (its share of update_info is half the
    // adapter: every lora_A, no lora_B) serves nothing, on rank 0 either: what a request through
    // the adapter would need from rank 1, rank 1 does not hold.
    testing::TempDir half;
    auto file = model_loader::SafetensorsFile::open(
        (kAdapters / "wide" / "adapter_model.safetensors").string());
    std::vector<std::pair<std::string, at::Tensor>> a_only;
    for (const auto& info : file->tensors()) {
      if (info.name.find(".lora_A.") != std::string::npos)
        a_only.emplace_back(info.name, file->tensor(info).clone());
    }
    model_loader::save_safetensors((half.path / "adapter_model.safetensors").string(), a_only);
    Worker disk({"--tensor-parallel-size", "2", "--enable-lora", "--weight-transfer-config",
                 R"({"backend": "disk"})"});
    trainer_sdk::RpcClient rpc(disk.process->endpoint(), 30s);
    const json config = json::parse(std::ifstream(kAdapters / "wide" / "adapter_config.json"));
    rpc.call("init_weight_transfer_engine", {{"init_info", json::object()}});
    rpc.call("start_weight_update", {{"lora_name", "split"}, {"lora_config", config}});
    rpc.call("update_weights",
             {{"update_info",
               {{{"path", (kAdapters / "wide").string()}}, {{"path", half.path.string()}}}}});
    auto [code, message] = testing::rpc_error(rpc, "finish_weight_update", json::object());
    BOOST_TEST(message.find("and no lora_B") != std::string::npos, message);
    std::tie(status, body) =
        disk.answer("/v1/completions", {{"model", "split"}, {"prompt", {1}}, {"max_tokens", 2}});
    BOOST_TEST(status == 404, body);
    BOOST_TEST(disk.greedy("tiny", 8) == greedy_of(base), boost::test_tools::per_element());
  }
  std::tie(status, body) = worker.answer("/v1/unload_lora_adapter", {{"lora_name", "wide"}});
  BOOST_TEST(status == 200, body);
  push("narrow", "p-2");  // replaces policy's shards on every rank, at rank 4
  BOOST_TEST(worker.greedy("policy", 8) == narrow, boost::test_tools::per_element());
  BOOST_TEST(worker.greedy("narrow", 8) == narrow, boost::test_tools::per_element());
  BOOST_TEST(client->call("weight_info")["lora_versions"] ==
             json({{"narrow", nullptr}, {"policy", "p-2"}}));
  BOOST_TEST(worker.greedy("tiny", 8) == greedy_of(base), boost::test_tools::per_element());
}

// Many replicas as one: a fan-out client opens every worker's adapter round, and verify fetches
// every worker's digests of the adapter.
BOOST_AUTO_TEST_CASE(a_fan_out_push_updates_an_adapter_on_every_replica) {
  const json golden = golden_lora();
  // Data-parallel ranks 0 and 1: each worker's rank in the trainer's group follows from its own.
  auto replica = [](int rank) {
    return std::vector<std::string>{"--enable-lora",
                                    "--weight-transfer-config",
                                    R"({"backend": "gloo"})",
                                    "--data-parallel-rank",
                                    std::to_string(rank),
                                    "--data-parallel-size",
                                    "2"};
  };
  Worker a(replica(0)), b(replica(1));
  auto both = std::make_shared<trainer_sdk::FanOutClient>(
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>>{
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(a.process->endpoint(), 30s),
          std::make_shared<trainer_sdk::ZmqWeightSyncClient>(b.process->endpoint(), 30s)});
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
  info.timeout = 30s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(
      info, both, adapter_source(kAdapters / "wide"));
  const json config = json::parse(std::ifstream(kAdapters / "wide" / "adapter_config.json"));
  engine->push({"fan-1", /*verify=*/true, trainer_sdk::AdapterTarget{"policy", config}});
  BOOST_TEST(both->adapter_checksums("policy").size() == 2u);
  for (Worker* w : {&a, &b}) {
    BOOST_TEST(w->greedy("policy", 8) == greedy_of(golden["adapters"]["wide"]),
               boost::test_tools::per_element());
  }
  engine->shutdown();
}

// An adapter is served only once its round has finished on every rank: a finish that fails
// (here, the one slot --max-loras allows taken by a load meanwhile) serves nothing, and what was
// served stays.
BOOST_AUTO_TEST_CASE(an_adapter_round_whose_finish_fails_serves_nothing) {
  const json golden = golden_lora();
  ScopedEnv env("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True");
  Worker worker({"--enable-lora", "--weight-transfer-config", R"({"backend": "disk"})"});
  trainer_sdk::RpcClient client(worker.process->endpoint(), 30s);
  const json config = json::parse(std::ifstream(kAdapters / "wide" / "adapter_config.json"));
  client.call("init_weight_transfer_engine", {{"init_info", json::object()}});
  client.call("start_weight_update", {{"lora_name", "late"}, {"lora_config", config}});
  client.call("update_weights", {{"update_info", {{"path", (kAdapters / "wide").string()}}}});
  auto [status, body] =
      worker.answer("/v1/load_lora_adapter",
                    {{"lora_name", "early"}, {"lora_path", (kAdapters / "narrow").string()}});
  BOOST_TEST(status == 200, body);
  auto [code, message] =
      testing::rpc_error(client, "finish_weight_update", {{"weight_version", "late-1"}});
  BOOST_TEST(message.find("as many as --max-loras 1 allows") != std::string::npos, message);
  BOOST_TEST(client.call("models", json::object())["data"].size() == 2u);  // the model, early
  BOOST_TEST(worker.greedy("early", 8) == greedy_of(golden["adapters"]["narrow"]),
             boost::test_tools::per_element());
  std::tie(status, body) = worker.answer("/v1/completions", {{"model", "late"}, {"prompt", {1}}});
  BOOST_TEST(status == 404);
  BOOST_TEST(client.call("weight_info")["lora_versions"] == json({{"early", nullptr}}));
}

BOOST_AUTO_TEST_CASE(lora_modules_without_enable_lora_stop_the_worker_with_a_reason) {
  BOOST_CHECK_EXCEPTION(Worker({"--lora-modules", "a=" + (kAdapters / "wide").string()}),
                        std::runtime_error, [](const std::runtime_error& e) {
                          return std::string(e.what()).find(
                                     "LoRA is not enabled. Use --enable-lora") != std::string::npos;
                        });
}

BOOST_AUTO_TEST_SUITE_END()
