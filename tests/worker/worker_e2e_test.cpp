// End to end: real hotswap-worker processes on loopback, driven over ZeroMQ JSON-RPC.
#include <boost/test/unit_test.hpp>

#include <signal.h>

#include <atomic>
#include <future>
#include <thread>

#include "model_loader/model_test_support.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "transport/tensor_digest.hpp"
#include "worker/rpc_error.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::CheckpointDir;
using testing::rpc_error;
using testing::WorkerProcess;

namespace {

model_loader::ModelConfig e2e_config() {
  auto c = testing::tiny_config(model_loader::architectures::kLlama);
  c.max_position_embeddings = 8192;
  return c;
}

// A checkpoint directory holding only the tensors `keep` selects.
struct PartialCheckpoint {
  testing::TempDir dir;
  PartialCheckpoint(const CheckpointDir& from,
                    const std::function<bool(const std::string&)>& keep) {
    std::vector<std::pair<std::string, at::Tensor>> tensors;
    for (auto& [name, t] : from.tensors()) {
      if (keep(name)) tensors.emplace_back(name, t);
    }
    model_loader::save_safetensors((dir.path / "model.safetensors").string(), tensors);
  }
  json path() const { return {{"path", dir.path.string()}}; }
};

struct Fixture {
  model_loader::ModelConfig config = e2e_config();
  CheckpointDir old_ckpt{config, 1000};
  CheckpointDir new_ckpt{config, 2000};

  std::unique_ptr<WorkerProcess> start(std::vector<std::string> extra = {},
                                       std::string timeout_seconds = "20") const {
    std::vector<std::string> args = {"--model",
                                     old_ckpt.dir.path.string(),
                                     "--weight-transfer-config",
                                     R"({"backend": "disk"})",
                                     "--timeout",
                                     timeout_seconds};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<WorkerProcess>(args);
  }
  static json path_of(const CheckpointDir& c) { return {{"path", c.dir.path.string()}}; }
};

trainer_sdk::RpcClient client_for(const WorkerProcess& w) {
  return trainer_sdk::RpcClient(w.endpoint(), 20s);
}

json checksums(trainer_sdk::RpcClient& client) {
  return client.call("weight_checker", {{"action", "checksum"}})["checksums"];
}

json greedy(std::int64_t max_tokens) {
  return {{"prompt_token_ids", {3, 17, 42, 5}}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(worker_e2e)

BOOST_FIXTURE_TEST_CASE(every_method_answers_with_vllms_bodies, Fixture) {
  auto worker = start({"--data-parallel-rank", "1", "--data-parallel-size", "2"});
  auto client = client_for(*worker);
  BOOST_TEST(client.call("health")["status"] == "ok");
  BOOST_TEST(client.call("weight_info") == json({{"weight_version", "default"}}));  // vLLM 0.34
  BOOST_TEST(client.call("get_world_size") == json({{"world_size", 2}}));
  BOOST_TEST(client.call("get_world_size", {{"include_dp", false}}) == json({{"world_size", 1}}));
  BOOST_TEST(client.call("is_paused") == json({{"is_paused", false}}));
  json before = client.call("generate", greedy(5));
  BOOST_TEST(before["token_ids"].size() == 5u);
  BOOST_TEST(before["finish_reason"] == "length");
  BOOST_TEST(!before.contains("logprobs"));

  auto old_sums = checksums(client);
  BOOST_TEST(old_sums.contains("dp1:pp0:pcp0:tp0:model.layers.0.self_attn.qkv_proj.weight"));
  BOOST_TEST(client.call("init_weight_transfer_engine", {{"init_info", json::object()}}) ==
             json({{"message", "Weight transfer initialized"}}));
  BOOST_TEST(client.call("start_weight_update") == json({{"message", "Weight update started"}}));
  // Element data_parallel_rank 1 of a per-rank list is this worker's.
  BOOST_TEST(client.call("update_weights",
                         {{"update_info", {{{"path", "/nowhere"}}, path_of(new_ckpt)}}}) ==
             json({{"message", "Weights updated"}}));
  BOOST_TEST(client.call("finish_weight_update", {{"weight_version", "step-1"}}) ==
             json({{"message", "Weight update finished"}}));
  BOOST_TEST(client.call("weight_info") == json({{"weight_version", "step-1"}}));
  BOOST_TEST(client.call("update_weight_version", {{"new_version", "step-1b"}}) ==
             json({{"success", true}, {"new_version", "step-1b"}}));

  json compare = client.call("weight_checker", {{"action", "compare"}, {"baseline", old_sums}});
  BOOST_TEST(compare["match"] == false);
  BOOST_TEST(compare["ranks"] == json({1}));
  BOOST_TEST(compare["mismatches"].size() == old_sums.size());  // every tensor changed
  auto ckpt_sums =
      client.call("weight_checker", {{"action", "checksum"}, {"format", "checkpoint"}});
  auto file = new_ckpt.open();
  BOOST_TEST(ckpt_sums["checksums"]["model.layers.1.mlp.up_proj.weight"] ==
             transport::sha256_hex(file.tensor("model.layers.1.mlp.up_proj.weight")));
  json same = client.call(
      "weight_checker",
      {{"action", "compare"}, {"format", "checkpoint"}, {"baseline", ckpt_sums["checksums"]}});
  BOOST_TEST(same ==
             json({{"match", true}, {"mismatches", json::array()}, {"ranks", json::array()}}));

  json after = client.call("generate", greedy(5));
  BOOST_TEST(after["weight_versions"] == json({{"step-1b", 0, 5}}));
  BOOST_TEST(client.call("pause", {{"mode", "keep"}}) == json({{"status", "paused"}}));
  BOOST_TEST(client.call("pause", {{"mode", "keep"}}) ==
             json({{"status", "paused"}}));  // idempotent
  BOOST_TEST(client.call("is_paused") == json({{"is_paused", true}}));
  BOOST_TEST(client.call("resume") == json({{"status", "resumed"}}));
  BOOST_TEST(client.call("resume") == json({{"status", "resumed"}}));
  // reset zeroes every weight (vLLM's checker), so the next update can be seen to land whole.
  BOOST_TEST(client.call("weight_checker", {{"action", "reset"}}) == json({{"status", "reset"}}));
  BOOST_TEST(checksums(client) != old_sums);
  BOOST_TEST(client.call("shutdown_weight_transfer_engine") ==
             json({{"message", "Weight transfer shut down"}}));
  client.call("init_weight_transfer_engine", {{"init_info", json::object()}});
  client.call("start_weight_update");
  client.call("update_weights", {{"update_info", {{{"path", "/nowhere"}}, path_of(new_ckpt)}}});
  client.call("finish_weight_update");
  json whole = client.call(
      "weight_checker",
      {{"action", "compare"}, {"format", "checkpoint"}, {"baseline", ckpt_sums["checksums"]}});
  BOOST_TEST(whole["match"] == true);
  BOOST_TEST(client.call("shutdown") == json({{"status", "shutting down"}}));
  BOOST_TEST(worker->wait_exit(15s) == 0);
}

BOOST_FIXTURE_TEST_CASE(every_error_path_keeps_the_worker_alive_and_its_weights, Fixture) {
  auto worker = start();
  auto client = client_for(*worker);
  auto sums = checksums(client);
  testing::TempDir empty;
  PartialCheckpoint renamed(new_ckpt,
                            [](const std::string& n) { return n == "model.norm.weight"; });
  {  // a checkpoint with a name the model does not have
    std::vector<std::pair<std::string, at::Tensor>> t = {
        {"model.layers.0.foo.weight", at::zeros({2})}};
    model_loader::save_safetensors((renamed.dir.path / "extra.safetensors").string(), t);
  }
  auto wrong_config = config;
  wrong_config.intermediate_size = 40;
  CheckpointDir wrong_shape(wrong_config, 3000);

  struct Case {
    std::string frame;
    int code;
    std::string needle;
    bool ends_session = true;
  };
  auto req = [](const std::string& method, const json& params) {
    return protocol::make_request(1, method, params).dump();
  };
  std::vector<Case> cases = {
      {"{not json", -32700, "Parse error"},
      {"[1, 2]", -32600, "expected a JSON object"},
      {R"({"jsonrpc":"2.0","id":1,"method":"pause","params":[1]})", -32600,
       "`params` must be an object"},
      {req("no_such_method", json::object()), -32601, "Method not found: 'no_such_method'"},
      {req("init_weight_transfer_engine", json::object()), -32602,
       "Missing 'init_info' in request body"},
      {req("init_weight_transfer_engine", {{"init_info", 5}}), -32602,
       "`init_info` must be a JSON object"},
      {req("init_weight_transfer_engine", {{"init_info", {{"bogus", 1}}}}), -32602,
       "unexpected keyword argument 'bogus'"},
      {req("update_weights", {{"update_info", path_of(new_ckpt)}}), -32000,
       "start_weight_update must be called before update_weights."},
      {req("finish_weight_update", json::object()), -32000,
       "finish_weight_update called without a matching start_weight_update."},
      {req("pause", {{"mode", "sideways"}}), -32602, "Invalid pause mode 'sideways'"},
      {req("generate", {{"prompt_token_ids", json::array()}}), -32602,
       "`prompt_token_ids` must be a non-empty"},
      {req("generate", {{"prompt_token_ids", {1, 999}}}), -32602, "prompt token id 999 is outside"},
      {req("weight_checker", {{"action", "explode"}}), -32602, "Invalid weight_checker action"},
      {req("weight_checker", {{"action", "compare"}}), -32602,
       "action='compare' requires a 'baseline' object"},
      {req("update_weight_version", json::object()), -32602, "Missing 'new_version'"},
  };
  // Update payloads that fail inside a session: each ends the session, the next start is clean.
  std::vector<Case> in_session = {
      // Rejected before it reaches the engine (vLLM's 400): the session stays open.
      {req("update_weights", json::object()), -32602, "Missing 'update_info' in request body",
       false},
      {req("update_weights", {{"update_info", {{"path", "relative/dir"}}}}), -32602,
       "`path` must be an absolute local directory"},
      {req("update_weights", {{"update_info", {{"path", "/no/such/dir"}}}}), -32602,
       "Shared-disk checkpoint path must be a local directory: /no/such/dir"},
      {req("update_weights", {{"update_info", {{"path", empty.path.string()}}}}), -32602,
       "Shared-disk checkpoint directory contains no safetensors files"},
      {req("update_weights", {{"update_info", renamed.path()}}), -32602,
       "unknown checkpoint tensor 'model.layers.0.foo.weight'"},
      {req("update_weights", {{"update_info", path_of(wrong_shape)}}), -32602,
       "has shape [32, 40] but the model's is [32, 48]"},
  };
  for (const auto& c : cases) {
    auto [code, message] = rpc_error(client, c.frame);
    BOOST_TEST(code == c.code, c.frame);
    BOOST_TEST(message.find(c.needle) != std::string::npos, c.frame << " → " << message);
  }
  for (const auto& c : in_session) {
    if (client.call("health")["weight_update_active"] == false) client.call("start_weight_update");
    auto [code, message] = rpc_error(client, c.frame);
    BOOST_TEST(code == c.code, c.frame);
    BOOST_TEST(message.find(c.needle) != std::string::npos, c.frame << " → " << message);
    BOOST_TEST(client.call("health")["weight_update_active"] == !c.ends_session, c.frame);
  }
  client.call("start_weight_update");
  auto [code, message] = rpc_error(client, "start_weight_update", json::object());
  BOOST_TEST(code == -32000);
  BOOST_TEST(message.find("already active") != std::string::npos);
  // Alive, clean, and on the same weights.
  BOOST_TEST(client.call("health")["status"] == "ok");
  BOOST_TEST(checksums(client) == sums);
  client.call("update_weights", {{"update_info", path_of(new_ckpt)}});
  client.call("finish_weight_update");
  BOOST_TEST(checksums(client) != sums);
}

BOOST_FIXTURE_TEST_CASE(an_unknown_backend_stops_the_worker_with_the_available_ones, Fixture) {
  BOOST_CHECK_EXCEPTION(
      WorkerProcess({"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                     R"({"backend": "carrier_pigeon"})"}),
      std::runtime_error, [](const std::runtime_error& e) {
        return std::string(e.what()).find(
                   "Invalid weight transfer backend: carrier_pigeon. "
                   "Available engines: ['disk'") != std::string::npos;
      });
}

BOOST_FIXTURE_TEST_CASE(gpu_backends_on_a_cpu_worker_stop_it_saying_what_to_change, Fixture) {
  for (const std::string backend : {"nccl", "sparse_nccl", "ipc"}) {
#ifdef HOTSWAP_WITH_CUDA
    const std::string wanted = "but this worker runs on cpu; start it with --device cuda:N";
#else
    const std::string wanted = "needs a GPU build of hotswap";
#endif
    BOOST_CHECK_EXCEPTION(
        WorkerProcess({"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                       R"({"backend": ")" + backend + R"("})"}),
        std::runtime_error, [&](const std::runtime_error& e) {
          const std::string what = e.what();
          if (what.find(wanted) == std::string::npos) BOOST_TEST_MESSAGE(what);
          return what.find(wanted) != std::string::npos;
        });
  }
}

BOOST_FIXTURE_TEST_CASE(a_long_call_does_not_block_the_socket, Fixture) {
  // The long call may take long (a sanitizer build, or other tests on both cores), and both the
  // worker's deadline and the client's give it room; the short calls get none. Once they have
  // been answered it is aborted: run to its end on a loaded machine it took 135 s, past the
  // suite's time limit.
  auto worker = start({}, "180");
  trainer_sdk::RpcClient long_client(worker->endpoint(), 180s);
  auto fast = client_for(*worker);
  auto generating =
      std::async(std::launch::async, [&] { return long_client.call("generate", greedy(3000)); });
  std::this_thread::sleep_for(100ms);
  int answered = 0;
  while (generating.wait_for(0ms) != std::future_status::ready && answered < 20) {
    auto t0 = std::chrono::steady_clock::now();
    BOOST_TEST(fast.call("health")["status"] == "ok");
    BOOST_TEST(fast.call("is_paused")["is_paused"] == false);
    BOOST_TEST((std::chrono::steady_clock::now() - t0 < 1s));
    ++answered;
  }
  BOOST_TEST(answered > 0);
  fast.call("abort_requests", json::object());
  const json generated = generating.get();
  BOOST_TEST(generated["token_ids"].size() <= 3000u);
  BOOST_TEST((generated["finish_reason"] == "abort" || generated["token_ids"].size() == 3000u));
}

BOOST_AUTO_TEST_CASE(a_long_update_does_not_block_health) {
  // Large enough that loading it takes far longer than a health round trip.
  auto config = testing::tiny_config(model_loader::architectures::kLlama);
  config.hidden_size = 1024;
  config.intermediate_size = 2816;
  config.num_attention_heads = 16;
  config.num_key_value_heads = 4;
  config.head_dim = 64;
  config.vocab_size = 32000;
  config.num_hidden_layers = 4;
  config = model_loader::ModelConfig::from_json(config.to_json());
  CheckpointDir old_ckpt(config, 1), new_ckpt(config, 2);
  WorkerProcess worker({"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                        R"({"backend": "disk"})", "--log-level", "debug"});
  auto updater = client_for(worker);
  auto fast = client_for(worker);
  updater.call("start_weight_update");
  // Health is polled from before the update starts until after it ends; replies stamped inside
  // the update's interval prove the socket kept answering, however fast the update is.
  using Clock = std::chrono::steady_clock;
  std::atomic<bool> polling{true};
  std::vector<Clock::time_point> replies;
  // The poller also drains the worker's output: every health call logs a debug line, and a
  // pipe nobody reads fills in a second or two and stalls the worker's control thread on it.
  std::thread poller([&] {
    while (polling) {
      BOOST_CHECK(fast.call("health").contains("status"));
      replies.push_back(Clock::now());
      worker.output();
    }
  });
  std::this_thread::sleep_for(20ms);
  auto started = Clock::now();
  json updated =
      updater.call("update_weights", {{"update_info", {{"path", new_ckpt.dir.path.string()}}}});
  auto ended = Clock::now();
  std::this_thread::sleep_for(20ms);
  polling = false;
  poller.join();
  BOOST_TEST(updated == json({{"message", "Weights updated"}}));
  auto during = std::count_if(replies.begin(), replies.end(),
                              [&](auto t) { return t > started && t < ended; });
  const double ms = std::chrono::duration<double, std::milli>(ended - started).count();
  BOOST_TEST_MESSAGE("health answered " << during << " times during a " << ms << " ms update");
  BOOST_TEST(during > 0);
  updater.call("finish_weight_update");
  // Generous: under sanitizers the health poller above leaves thousands of debug lines to read.
  BOOST_TEST(worker.wait_for_output("hotswap-worker: update_weights", 30s));
}

BOOST_FIXTURE_TEST_CASE(staged_failure_keeps_serving_old_weights, Fixture) {
  auto worker = start({"--quantization", "int8"});
  auto client = client_for(*worker);
  json old_tokens = client.call("generate", greedy(8))["token_ids"];
  auto sums = checksums(client);
  PartialCheckpoint partial(new_ckpt, [](const std::string& n) {
    return n == "model.layers.0.input_layernorm.weight" ||
           n == "model.layers.0.self_attn.q_proj.weight";
  });
  client.call("start_weight_update");
  client.call("update_weights", {{"update_info", partial.path()}});
  BOOST_CHECK_THROW(client.call("finish_weight_update"), protocol::ValueError);
  BOOST_TEST(checksums(client) == sums);
  BOOST_TEST(client.call("health")["status"] == "ok");
  BOOST_TEST(client.call("generate", greedy(8))["token_ids"] == old_tokens);
}

BOOST_FIXTURE_TEST_CASE(inplace_failure_marks_the_model_dirty_until_a_full_update, Fixture) {
  auto worker = start({"--quantization", "int8", "--update-mode", "inplace"});
  auto client = client_for(*worker);
  PartialCheckpoint partial(new_ckpt, [](const std::string& n) {
    return n == "model.layers.0.input_layernorm.weight" ||
           n == "model.layers.0.self_attn.q_proj.weight";
  });
  client.call("start_weight_update");
  client.call("update_weights", {{"update_info", partial.path()}});
  BOOST_CHECK_THROW(client.call("finish_weight_update"), protocol::ValueError);
  json health = client.call("health");
  BOOST_TEST(health["status"] == "dirty");
  auto [code, message] = rpc_error(client, "generate", greedy(4));
  BOOST_TEST(code == -32000);
  BOOST_TEST(message.find("the model is dirty") != std::string::npos);
  client.call("start_weight_update");
  client.call("update_weights", {{"update_info", path_of(new_ckpt)}});
  client.call("finish_weight_update", {{"weight_version", "recovered"}});
  BOOST_TEST(client.call("health")["status"] == "ok");
  BOOST_TEST(client.call("generate", greedy(4))["weight_versions"] == json({{"recovered", 0, 4}}));
}

BOOST_FIXTURE_TEST_CASE(pause_modes_and_weight_version_spans, Fixture) {
  auto worker = start();
  auto a = client_for(*worker);
  auto b = client_for(*worker);
  a.call("update_weight_version", {{"new_version", "v1"}});

  // keep: frozen in flight, then continued on the new weights after resume. (The request is
  // far longer than the test; an abort ends it once both versions have produced tokens.)
  auto kept = std::async(std::launch::async, [&] { return b.call("generate", greedy(8000)); });
  std::this_thread::sleep_for(300ms);
  a.call("pause", {{"mode", "keep"}});
  a.call("start_weight_update");
  a.call("update_weights", {{"update_info", path_of(new_ckpt)}});
  a.call("finish_weight_update", {{"weight_version", "v2"}});
  a.call("resume");
  std::this_thread::sleep_for(300ms);
  // abort: the request in flight ends with finish_reason "abort".
  a.call("pause", {{"mode", "abort"}});
  json result = kept.get();
  BOOST_TEST(result["finish_reason"] == "abort");
  json spans = result["weight_versions"];
  BOOST_REQUIRE_EQUAL(spans.size(), 2u);
  BOOST_TEST(spans[0][0] == "v1");
  BOOST_TEST(spans[1][0] == "v2");
  BOOST_TEST(spans[0][1] == 0);
  BOOST_TEST(spans[0][2] == spans[1][1]);
  BOOST_TEST(spans[1][2] == result["token_ids"].size());
  // Paused in abort mode, new requests are refused (vLLM 0.34's 503: retry after resume); in keep
  // mode they wait.
  HOTSWAP_CHECK_THROW_MSG(b.call("generate", greedy(3)), protocol::OverloadedError,
                          "Generation is paused. Please retry after it resumes.");
  a.call("pause", {{"mode", "keep"}});
  auto waiting = std::async(std::launch::async, [&] { return b.call("generate", greedy(3)); });
  BOOST_TEST((waiting.wait_for(300ms) == std::future_status::timeout));
  a.call("resume");
  json waited = waiting.get();
  BOOST_TEST(waited["finish_reason"] == "length");
  BOOST_TEST(waited["weight_versions"] == json({{"v2", 0, 3}}));

  // wait: pause returns once the request in flight has finished.
  auto drained = std::async(std::launch::async, [&] { return b.call("generate", greedy(200)); });
  std::this_thread::sleep_for(100ms);
  a.call("pause", {{"mode", "wait"}});
  BOOST_TEST(
      (drained.wait_for(5s) == std::future_status::ready));  // its reply may trail the pause reply
  BOOST_TEST(drained.get()["finish_reason"] == "length");
  a.call("resume");
}

BOOST_FIXTURE_TEST_CASE(sigterm_shuts_the_worker_down_cleanly, Fixture) {
  auto worker = start();
  auto client = client_for(*worker);
  client.call("health");
  pid_t pid = worker->pid();
  BOOST_TEST(worker->stop(10s) == 0);
  BOOST_TEST(::kill(pid, 0) == -1);  // gone
  BOOST_TEST(worker->output().find("hotswap-worker: shutting down") != std::string::npos);
}

// The four calls of one worker run one at a time: a second weight-transfer call while one runs is
// refused (vLLM's worker serializes them), named, and counted as an error of its operation, and
// the call that runs is neither disturbed nor renamed in health.
BOOST_FIXTURE_TEST_CASE(a_weight_call_while_another_runs_is_refused_and_counted, Fixture) {
  WorkerProcess worker({"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                        R"({"backend": "gloo"})", "--timeout", "3"});
  // Nobody listens there: the init waits for its trainer until the worker's timeout.
  const json init_info = {{"master_address", "127.0.0.1"},
                          {"master_port", transport::pick_free_port()},
                          {"rank_offset", 1},
                          {"world_size", 2}};
  auto init = std::async(std::launch::async, [&] {
    auto own = client_for(worker);
    try {
      own.call("init_weight_transfer_engine", {{"init_info", init_info}});
      return std::string("succeeded");
    } catch (const std::exception& e) {
      return std::string(e.what());
    }
  });
  auto client = client_for(worker);
  bool running = false;
  for (int i = 0; i < 250 && !running; ++i) {  // at most 5 s
    running = client.call("health")["weight_call"] == "init_weight_transfer_engine";
    if (!running) std::this_thread::sleep_for(20ms);
  }
  BOOST_REQUIRE_MESSAGE(running, "the init never showed in health");
  std::string refusal;
  try {
    client.call("start_weight_update");
  } catch (const protocol::RuntimeError& e) {
    refusal = e.what();
  }
  BOOST_TEST(refusal.find("another weight-transfer call is still running") != std::string::npos,
             refusal);
  BOOST_TEST(client.call("health")["weight_call"] == "init_weight_transfer_engine");
  BOOST_TEST(init.get() != "succeeded");  // no trainer came
  const std::string metrics = client.call("metrics")["text"];
  for (const char* line :
       {"hotswap_weight_update_operations_total{operation=\"start\",status=\"error\"} 1",
        "hotswap_weight_update_operations_total{operation=\"init\",status=\"error\"} 1"}) {
    BOOST_TEST(metrics.find(line) != std::string::npos, line);
  }
  BOOST_TEST(client.call("health")["weight_call"].is_null());
  BOOST_TEST(client.call("health")["status"] == "ok");
}

BOOST_AUTO_TEST_SUITE_END()
