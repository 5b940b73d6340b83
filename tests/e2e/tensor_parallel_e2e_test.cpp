// Tensor-parallel hotswap-workers (--tensor-parallel-size 2: two rank processes each) on
// loopback: they generate what a tp = 1 worker does, take gloo and disk rounds with vLLM's rank
// semantics (every rank a rank of the trainer's group; per-rank update_info lists; checksums
// keyed tp0 and tp1), verified per rank, next to a second replica (dp = 2); and a rank killed
// puts the worker in a failed state that names it.
#include <boost/test/unit_test.hpp>

#include <httplib.h>

#include <signal.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/ones.h>

#include <thread>

#include <zmq.hpp>

#include "e2e/e2e_support.hpp"
#include "model_loader/model_test_support.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "protocol/errors.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/fan_out_client.hpp"
#include "trainer_sdk/shm_trainer_engine.hpp"
#include "trainer_sdk/sparse_trainer_engine.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::CheckpointDir;
using testing::WorkerProcess;

namespace {

struct Fixture {
  explicit Fixture(
      model_loader::ModelConfig c = testing::tiny_config(model_loader::architectures::kQwen3Moe))
      : config(std::move(c)), old_ckpt{config, 4100}, new_ckpt{config, 4200} {}
  model_loader::ModelConfig config;
  CheckpointDir old_ckpt;
  CheckpointDir new_ckpt;

  std::unique_ptr<WorkerProcess> worker(int tp, const std::string& backend, int dp_rank = 0,
                                        int dp_size = 1, const std::string& update_mode = "staged",
                                        const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args{"--model",
                                  old_ckpt.dir.path.string(),
                                  "--weight-transfer-config",
                                  json{{"backend", backend}}.dump(),
                                  "--tensor-parallel-size",
                                  std::to_string(tp),
                                  "--data-parallel-rank",
                                  std::to_string(dp_rank),
                                  "--data-parallel-size",
                                  std::to_string(dp_size),
                                  "--timeout",
                                  "20",
                                  "--update-mode",
                                  update_mode};
    args.insert(args.end(), extra.begin(), extra.end());
    return std::make_unique<WorkerProcess>(args);
  }
  std::shared_ptr<trainer_sdk::TensorListSource> source() const {
    std::vector<std::pair<std::string, at::Tensor>> t;
    for (auto& [name, tensor] : new_ckpt.tensors())
      t.emplace_back(name, tensor);
    return std::make_shared<trainer_sdk::TensorListSource>(t);
  }
};

std::shared_ptr<trainer_sdk::ZmqWeightSyncClient> client_of(const WorkerProcess& w) {
  return std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w.endpoint(), 30s);
}

json greedy() {
  return {
      {"prompt_token_ids", {3, 17, 42, 5}}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 0}};
}

// `tested` generates, greedily, what `reference` does: the same tokens, and logprobs within
// float32 rounding. Returns the reference's reply.
json expect_same_greedy(trainer_sdk::ZmqWeightSyncClient& reference,
                        trainer_sdk::ZmqWeightSyncClient& tested) {
  const json a = reference.call("generate", greedy());
  const json b = tested.call("generate", greedy());
  BOOST_TEST(a["token_ids"] == b["token_ids"]);
  auto la = a["logprobs"].get<std::vector<double>>(), lb = b["logprobs"].get<std::vector<double>>();
  BOOST_TEST_REQUIRE(la.size() == lb.size());
  for (std::size_t i = 0; i < la.size(); ++i)
    BOOST_TEST(std::abs(la[i] - lb[i]) < 1e-4, "token " << i);
  return a;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tensor_parallel_end_to_end)

BOOST_FIXTURE_TEST_CASE(a_tp_2_worker_generates_what_a_tp_1_worker_does, Fixture) {
  auto one = worker(1, "gloo");
  auto two = worker(2, "gloo");
  auto c1 = client_of(*one);
  auto c2 = client_of(*two);
  const json a = expect_same_greedy(*c1, *c2);
  // Two sequences in one batch, then a third after the first have gone (their caches too).
  std::vector<std::thread> batch;
  std::vector<json> got(2);
  for (int i = 0; i < 2; ++i) {
    batch.emplace_back([&, i] {
      got[i] = client_of(*two)->call(
          "generate", {{"prompt_token_ids", {1 + i, 2, 3}}, {"max_tokens", 5}, {"temperature", 0}});
    });
  }
  for (auto& t : batch)
    t.join();
  for (int i = 0; i < 2; ++i) {
    const json alone = c1->call(
        "generate", {{"prompt_token_ids", {1 + i, 2, 3}}, {"max_tokens", 5}, {"temperature", 0}});
    BOOST_TEST(got[i]["token_ids"] == alone["token_ids"]);
  }
  BOOST_TEST(c2->call("generate", greedy())["token_ids"] == a["token_ids"]);
  // A bad request is refused on rank 0; no rank steps on it, and every rank serves on.
  BOOST_CHECK_THROW(c2->call("generate", {{"prompt_token_ids", {3, 999}}, {"max_tokens", 2}}),
                    protocol::ValueError);
  BOOST_TEST(c2->call("generate", greedy())["token_ids"] == a["token_ids"]);
  const json health = c2->call("health");
  BOOST_TEST(health["tensor_parallel_size"] == 2);
  BOOST_TEST(health["status"] == "ok");
  BOOST_TEST(c2->call("get_world_size")["world_size"] == 2);
  // Runtime checksums list both ranks' shards, each keyed by its own tp index.
  const json sums = c2->call("weight_checker", {{"action", "checksum"}})["checksums"];
  BOOST_TEST(sums.contains("dp0:pp0:pcp0:tp0:model.layers.0.self_attn.qkv_proj.weight"));
  BOOST_TEST(sums.contains("dp0:pp0:pcp0:tp1:model.layers.0.self_attn.qkv_proj.weight"));
  BOOST_TEST(sums["dp0:pp0:pcp0:tp0:model.norm.weight"] ==
             sums["dp0:pp0:pcp0:tp1:model.norm.weight"]);
}

// Both ranks' KV caches hold 6 blocks of 4 positions; three requests needing 5 blocks each
// run at once. Rank 0 preempts the latest, every rank frees the same blocks in the same step,
// and each request still gets what a tp = 1 worker with room to spare gives it.
BOOST_FIXTURE_TEST_CASE(tp_ranks_preempt_together_when_their_kv_caches_are_full, Fixture) {
  const std::int64_t kv_heads_per_rank = std::max<std::int64_t>(1, config.num_key_value_heads / 2);
  const std::int64_t block_bytes =
      2 * config.num_hidden_layers * 4 * kv_heads_per_rank * config.head_dim * 4;  // float32
  auto one = worker(1, "gloo");
  auto two =
      worker(2, "gloo", 0, 1, "staged",
             {"--block-size", "4", "--kv-cache-memory-bytes", std::to_string(6 * block_bytes)});
  auto c1 = client_of(*one);
  auto c2 = client_of(*two);
  auto request = [](int i) {
    std::vector<std::int64_t> prompt(static_cast<std::size_t>(5 + i), 7 + i);
    return json{{"prompt_token_ids", prompt}, {"max_tokens", 12}, {"temperature", 0}};
  };
  // A metric's value in the worker's Prometheus text.
  auto metric = [&](const std::string& name) {
    const std::string text = c2->call("metrics")["text"].get<std::string>();
    const auto at = text.find("\n" + name + "{");
    BOOST_TEST_REQUIRE(at != std::string::npos, name);
    const auto end = text.find('\n', at + 1);
    return std::stod(text.substr(text.rfind(' ', end) + 1, end - text.rfind(' ', end) - 1));
  };
  // Held in keep mode, the three queue and then join one batch together.
  c2->call("pause", {{"mode", "keep"}});
  std::vector<std::thread> batch;
  std::vector<json> got(3);
  for (int i = 0; i < 3; ++i)
    batch.emplace_back([&, i] { got[i] = client_of(*two)->call("generate", request(i)); });
  for (int tries = 0; metric("vllm:num_requests_waiting") < 3 && tries < 500; ++tries)
    std::this_thread::sleep_for(10ms);
  c2->call("resume");
  for (auto& t : batch)
    t.join();
  for (int i = 0; i < 3; ++i) {
    BOOST_TEST(got[i]["token_ids"] == c1->call("generate", request(i))["token_ids"],
               "request " << i);
  }
  BOOST_TEST(c2->call("health")["status"] == "ok");
  BOOST_TEST(metric("vllm:num_preemptions_total") > 0);
}

BOOST_FIXTURE_TEST_CASE(expert_parallel_ranks_generate_what_tp_1_does_and_take_rounds, Fixture) {
  // --enable-expert-parallel: the 4 experts of each layer spread over 2 ranks, whole.
  auto one = worker(1, "gloo");
  auto ep = worker(2, "gloo", 0, 1, "staged", {"--enable-expert-parallel"});
  auto c1 = client_of(*one), c2 = client_of(*ep);
  expect_same_greedy(*c1, *c2);
  // Each rank receives every expert and keeps its own; the checkpoint checksums that verify
  // the round put every expert back together from the rank that holds it.
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
  info.timeout = 30s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, c2, source());
  engine->push({"ep-round", /*verify=*/true});
  testing::verify_serves(*c2, new_ckpt);
  engine->shutdown();
}

BOOST_FIXTURE_TEST_CASE(gloo_rounds_reach_every_rank_of_two_tp_2_replicas, Fixture) {
  auto w0 = worker(2, "gloo", 0, 2);
  auto w1 = worker(2, "gloo", 1, 2);
  auto c0 = client_of(*w0), c1 = client_of(*w1);
  BOOST_TEST(c0->call("get_world_size")["world_size"] == 4);
  auto both = std::make_shared<trainer_sdk::FanOutClient>(
      std::vector<std::shared_ptr<trainer_sdk::ZmqWeightSyncClient>>{c0, c1});
  const json baseline = c0->call("weight_checker", {{"action", "checksum"}})["checksums"];
  for (bool packed : {true, false}) {
    // The trainer and 2 replicas × 2 ranks: a group of 5.
    trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 5, 0);
    info.packed = packed;
    info.packed_buffer_size_bytes = 3000;
    info.timeout = 30s;
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, both, source());
    engine->push({packed ? "tp-packed" : "tp-unpacked", /*verify=*/true});
    testing::verify_serves(*c0, new_ckpt);
    testing::verify_serves(*c1, new_ckpt);
    engine->shutdown();
  }
  // What the ranks now hold is what a tp = 2 worker loaded from the new checkpoint holds.
  auto fresh = std::make_unique<WorkerProcess>(std::vector<std::string>{
      "--model", new_ckpt.dir.path.string(), "--tensor-parallel-size", "2"});
  const json expected = client_of(*fresh)->call("weight_checker", {{"action", "checksum"}});
  BOOST_TEST(
      c1->call("weight_checker", {{"action", "compare"}, {"baseline", expected["checksums"]}})
          .at("match") == false);  // dp1's keys are not dp0's
  const json compared =
      c0->call("weight_checker", {{"action", "compare"}, {"baseline", expected["checksums"]}});
  BOOST_TEST(compared["match"] == true, compared.dump());
  // Against the old weights every rank of replica 1 mismatches: global ranks 2 and 3.
  json old_dp1;
  for (const auto& [key, hex] : baseline.items()) {
    std::string k = key;
    old_dp1[k.replace(0, 3, "dp1")] = hex;
  }
  BOOST_TEST(c1->call("weight_checker", {{"action", "compare"}, {"baseline", old_dp1}})["ranks"] ==
             json({2, 3}));
  BOOST_TEST(c0->call("generate", greedy())["token_ids"] ==
             client_of(*fresh)->call("generate", greedy())["token_ids"]);
}

BOOST_FIXTURE_TEST_CASE(shm_and_sparse_gloo_rounds_land_on_each_rank_s_slice, Fixture) {
  {
    const int port = transport::pick_free_port();
    auto w = worker(2, "shm", 0, 1, "staged", {"--http-port", std::to_string(port)});
    auto c = client_of(*w);
    // Every rank reads every chunk (keeping its slice): 2 readers.
    trainer_sdk::ShmTrainerInitInfo info(2, 0);
    info.packed_buffer_size_bytes = 16384;  // several chunks
    auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, c, source());
    engine->push({"tp-shm", /*verify=*/true});
    testing::verify_serves(*c, new_ckpt);
    engine->shutdown();
    // /metrics counts what every rank received: each the whole round.
    httplib::Client http("127.0.0.1", port);
    auto res = http.Get("/metrics");
    BOOST_REQUIRE(res);
    BOOST_TEST(testing::malformed_metric_lines(res->body).empty(), res->body);
    std::uint64_t round = 0;
    for (const auto& [name, tensor] : new_ckpt.tensors())
      round += tensor.nbytes();
    auto value_of = [&](const std::string& series) -> std::uint64_t {
      auto at = res->body.find("\n" + series + " ");
      BOOST_REQUIRE_MESSAGE(at != std::string::npos, series << " missing from\n" << res->body);
      return std::stoull(res->body.substr(at + series.size() + 2));
    };
    const std::string family = "hotswap_tensor_parallel_rank_weight_bytes_received_total";
    const std::uint64_t r0 = value_of(family + "{tp_rank=\"0\"}");
    const std::uint64_t r1 = value_of(family + "{tp_rank=\"1\"}");
    BOOST_TEST(r0 >= round);
    BOOST_TEST(r1 == r0);
    BOOST_TEST(value_of("hotswap_weight_bytes_received_total") == r0 + r1);
  }
  auto w = worker(2, "sparse_gloo");
  auto c = client_of(*w);
  trainer_sdk::SparseGlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
  info.timeout = 30s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, c);
  auto* sparse = dynamic_cast<trainer_sdk::SparseTrainerEngine*>(engine.get());
  BOOST_REQUIRE(sparse != nullptr);
  // Tensors split by rows (k_proj, the vocabulary), by columns (o_proj, an expert's down
  // projection) and not at all (a norm): every rank applies the indices in its slice.
  auto file = old_ckpt.open();
  std::vector<trainer_sdk::SparsePatch> patches;
  std::map<std::string, at::Tensor> expected;
  for (const std::string name :
       {"model.layers.0.self_attn.k_proj.weight", "model.embed_tokens.weight",
        "model.layers.1.self_attn.o_proj.weight", "model.layers.0.mlp.experts.2.down_proj.weight",
        "model.norm.weight"}) {
    at::Tensor whole = file.tensor(name).clone();
    at::Tensor indices = at::arange(0, whole.numel(), 5, at::TensorOptions().dtype(at::kInt));
    at::Tensor values = at::arange(indices.numel()).to(at::kFloat) * 0.5 - 3;
    whole.view({-1}).index_put_({indices.to(at::kLong)}, values);
    expected[name] = whole;
    patches.push_back({name, indices, values, whole.sizes().vec()});
  }
  sparse->send_weights(patches, "tp-sparse");
  const json after =
      c->call("weight_checker", {{"action", "checksum"}, {"format", "checkpoint"}})["checksums"];
  for (const auto& name : file.names()) {
    at::Tensor want = expected.count(name) ? expected[name] : file.tensor(name);
    BOOST_TEST(after[name] == transport::sha256_hex(want), name);
  }
}

BOOST_FIXTURE_TEST_CASE(per_rank_update_info_lists_are_indexed_by_each_rank, Fixture) {
  auto w = worker(2, "disk");
  auto c = client_of(*w);
  const json before = c->call("weight_checker", {{"action", "checksum"}})["checksums"];
  // One entry for rank 0 only: rank 1's entry is missing, the round fails on every rank, and
  // both keep their old weights.
  c->call("start_weight_update");
  try {
    c->call("update_weights", {{"update_info", json::array({{{"path", new_ckpt.dir.path}}})}});
    BOOST_FAIL("expected a ValueError");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("tensor-parallel rank 1: `update_info` has 1 entries "
                                          "but this worker takes entry 1") != std::string::npos,
               e.what());
  }
  BOOST_TEST(c->call("health")["weight_update_active"] == false);
  BOOST_TEST(c->call("weight_checker", {{"action", "checksum"}})["checksums"] == before);
  // An entry per rank: each loads its own (here the same checkpoint) and the round commits.
  c->call("start_weight_update");
  const json entry = {{"path", new_ckpt.dir.path}};
  c->call("update_weights", {{"update_info", json::array({entry, entry})}});
  c->call("finish_weight_update", {{"weight_version", "per-rank"}});
  testing::verify_serves(*c, new_ckpt);
  BOOST_TEST(c->call("weight_info")["weight_version"] == "per-rank");
}

BOOST_FIXTURE_TEST_CASE(an_inplace_round_that_fails_on_one_rank_makes_the_worker_dirty, Fixture) {
  auto w = worker(2, "disk", 0, 1, "inplace");
  auto c = client_of(*w);
  // Rank 0 is sent a checkpoint of nothing it loads, rank 1 the first layer's attention: only
  // rank 1 writes live weights. Its second entry does not exist, so the round fails there.
  testing::TempDir nothing, some;
  model_loader::save_safetensors((nothing.path / "model.safetensors").string(),
                                 {{"model.layers.0.self_attn.rotary_emb.inv_freq", at::ones({4})}});
  std::vector<std::pair<std::string, at::Tensor>> part;
  for (auto& [name, t] : new_ckpt.tensors()) {
    if (name.starts_with("model.layers.0.self_attn.")) part.emplace_back(name, t);
  }
  model_loader::save_safetensors((some.path / "model.safetensors").string(), part);
  c->call("start_weight_update");
  c->call("update_weights",
          {{"update_info", json::array({{{"path", nothing.path}}, {{"path", some.path}}})}});
  BOOST_CHECK_THROW(
      c->call("update_weights",
              {{"update_info", json::array({{{"path", nothing.path}},
                                            {{"path", (some.path / "gone").string()}}})}}),
      protocol::Error);
  const json health = c->call("health");
  BOOST_TEST(health["weight_update_active"] == false);
  BOOST_TEST(health["status"] == "dirty", health.dump());
  BOOST_CHECK_THROW(c->call("generate", greedy()), protocol::Error);
  // A full round on every rank makes it whole again.
  c->call("start_weight_update");
  c->call("update_weights", {{"update_info", {{"path", new_ckpt.dir.path}}}});
  c->call("finish_weight_update");
  BOOST_TEST(c->call("health")["status"] == "ok");
  testing::verify_serves(*c, new_ckpt);
}

BOOST_FIXTURE_TEST_CASE(a_rank_killed_mid_round_fails_the_worker_naming_it, Fixture) {
  auto w = worker(2, "gloo");
  auto c = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(w->endpoint(), 30s);
  const auto ranks = testing::children_of(w->pid());
  BOOST_REQUIRE_EQUAL(ranks.size(), 1u);
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 3, 0);
  info.packed = false;
  info.timeout = 10s;
  auto engine = trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, c, source());
  ::kill(ranks[0], SIGKILL);
  BOOST_CHECK_THROW(engine->send_weights(), protocol::Error);
  json health;
  for (int i = 0; i < 100; ++i) {
    health = c->call("health");
    if (health["status"] == "failed") break;
    std::this_thread::sleep_for(100ms);
  }
  BOOST_TEST(health["status"] == "failed");
  BOOST_TEST(health["error"].get<std::string>().find("tensor-parallel rank 1 (of 2) exited") == 0u,
             health.dump());
  try {
    c->call("generate", greedy());
    BOOST_FAIL("expected an error");
  } catch (const protocol::Error& e) {
    BOOST_TEST(
        std::string(e.what()).find("tensor-parallel rank 1 (of 2) exited") != std::string::npos,
        e.what());
  }
}

BOOST_FIXTURE_TEST_CASE(a_rank_whose_forward_step_fails_stops_and_fails_the_worker, Fixture) {
  // Rank 0 checks a step before any rank runs it, so only a step sent to rank 1 directly (on
  // its model channel, as rank 0 would) fails there alone. Rank 1's shard is then out of step
  // with rank 0's: it must stop rather than serve on, and the worker must say so.
  auto w = worker(2, "gloo");
  auto c = client_of(*w);
  const std::string marker = "hotswap-worker rank 1 ready: model ";
  BOOST_REQUIRE(w->wait_for_output(marker, 10s));
  const std::string& out = w->output();
  const auto begin = out.find(marker) + marker.size();
  const std::string endpoint = out.substr(begin, out.find(';', begin) - begin);
  zmq::context_t context;
  zmq::socket_t channel(context, zmq::socket_type::dealer);
  channel.set(zmq::sockopt::linger, 0);
  channel.set(zmq::sockopt::rcvtimeo, 10000);
  channel.connect(endpoint);
  const json step = {{"jsonrpc", "2.0"},
                     {"id", 1},
                     {"method", "forward"},
                     {"params",
                      {{"released", json::array()},
                       {"slices", {{{"cache", 77}, {"length", 0}, {"tokens", 1}}}},
                       {"tokens", {1 << 30}},  // past the vocabulary
                       {"all_positions", false}}}};
  channel.send(zmq::buffer(step.dump()));
  zmq::message_t reply;
  BOOST_REQUIRE(channel.recv(reply));
  BOOST_TEST(json::parse(reply.to_string()).contains("error"), reply.to_string());
  BOOST_TEST(w->wait_for_output("a forward step failed; this rank stops", 10s), w->output());
  json health;
  for (int i = 0; i < 100; ++i) {
    health = c->call("health");
    if (health["status"] == "failed") break;
    std::this_thread::sleep_for(100ms);
  }
  BOOST_TEST(health["status"] == "failed", health.dump());
  BOOST_TEST(health.value("error", std::string())
                     .find("tensor-parallel rank 1 (of 2) exited with "
                           "status 1") == 0u,
             health.dump());
  BOOST_CHECK_THROW(c->call("generate", greedy()), protocol::Error);
}

BOOST_AUTO_TEST_CASE(a_model_that_does_not_split_stops_the_worker_saying_why) {
  auto config = testing::tiny_config(model_loader::architectures::kLlama);  // 4 heads
  CheckpointDir ckpt(config, 4300);
  BOOST_CHECK_EXCEPTION(
      WorkerProcess({"--model", ckpt.dir.path.string(), "--tensor-parallel-size", "3"}),
      std::runtime_error, [](const std::runtime_error& e) {
        return std::string(e.what()).find(
                   "Total number of attention heads (4) must be "
                   "divisible by tensor parallel size (3)") != std::string::npos;
      });
}

BOOST_AUTO_TEST_SUITE_END()
