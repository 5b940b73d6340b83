// vLLM's HTTP routes on a real hotswap-worker process: paths, methods, bodies, status codes.
#include <boost/test/unit_test.hpp>

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <thread>

#include "model_loader/model_test_support.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using nlohmann::json;
using testing::CheckpointDir;
using testing::WorkerProcess;

namespace {

struct Fixture {
  model_loader::ModelConfig config = testing::tiny_config(model_loader::architectures::kQwen2);
  CheckpointDir old_ckpt{config, 1100};
  CheckpointDir new_ckpt{config, 1200};
  int port = transport::pick_free_port();
  WorkerProcess worker{{"--model", old_ckpt.dir.path.string(), "--weight-transfer-config",
                        R"({"backend": "disk"})", "--http-port", std::to_string(port)}};
  httplib::Client http{"127.0.0.1", port};

  std::pair<int, json> post(const std::string& path, const std::string& body = "") {
    auto res = http.Post(path.c_str(), body, "application/json");
    BOOST_REQUIRE_MESSAGE(res, "no HTTP reply for " << path);
    return {res->status, json::parse(res->body, nullptr, false)};
  }
  std::pair<int, json> get(const std::string& path) {
    auto res = http.Get(path.c_str());
    BOOST_REQUIRE_MESSAGE(res, "no HTTP reply for " << path);
    return {res->status, json::parse(res->body, nullptr, false)};
  }
};

using Reply = std::pair<int, json>;

}  // namespace

BOOST_AUTO_TEST_SUITE(http_routes)

BOOST_FIXTURE_TEST_CASE(routes_answer_with_vllms_status_codes_and_bodies, Fixture) {
  json path = {{"update_info", {{"path", new_ckpt.dir.path.string()}}}};
  BOOST_TEST((post("/init_weight_transfer_engine", R"({"init_info": {}})") ==
              Reply{200, {{"message", "Weight transfer initialized"}}}));
  BOOST_TEST((post("/start_weight_update") == Reply{200, {{"message", "Weight update started"}}}));
  BOOST_TEST(
      (post("/update_weights", path.dump()) == Reply{200, {{"message", "Weights updated"}}}));
  BOOST_TEST((post("/finish_weight_update", R"({"weight_version": "step-3"})") ==
              Reply{200, {{"message", "Weight update finished"}}}));
  BOOST_TEST((get("/weight_info") == Reply{200, {{"weight_version", "step-3"}}}));
  BOOST_TEST((post("/update_weight_version", R"({"new_version": "step-4"})") ==
              Reply{200, {{"success", true}, {"new_version", "step-4"}}}));
  BOOST_TEST((post("/pause?mode=keep") == Reply{200, {{"status", "paused"}}}));
  BOOST_TEST((get("/is_paused") == Reply{200, {{"is_paused", true}}}));
  BOOST_TEST((post("/resume") == Reply{200, {{"status", "resumed"}}}));
  BOOST_TEST((get("/get_world_size") == Reply{200, {{"world_size", 1}}}));
  BOOST_TEST((get("/get_world_size?include_dp=false") == Reply{200, {{"world_size", 1}}}));
  auto [status, sums] = post("/weight_checker", R"({"action": "checksum"})");
  BOOST_TEST(status == 200);
  BOOST_TEST(sums["checksums"].contains("dp0:pp0:pcp0:tp0:model.norm.weight"));
  auto [gen_status, generated] =
      post("/generate", R"({"prompt_token_ids": [1, 2, 3], "max_tokens": 3, "temperature": 0})");
  BOOST_TEST(gen_status == 200);
  BOOST_TEST(generated["weight_versions"] == json({{"step-4", 0, 3}}));
}

BOOST_FIXTURE_TEST_CASE(vllm_034_routes_abort_503_while_paused_and_a_held_trainer, Fixture) {
  // The weights a worker starts with are labelled "default".
  BOOST_TEST((get("/weight_info") == Reply{200, {{"weight_version", "default"}}}));

  // abort_requests: vLLM's body and reply; a request in flight ends with "abort".
  BOOST_TEST((post("/abort_requests") == Reply{200, {{"status", "aborted"}, {"aborted", 0}}}));
  BOOST_TEST((post("/abort_requests", "[1]").first == 400));
  BOOST_TEST((post("/abort_requests", "{").first == 400));
  BOOST_TEST((post("/abort_requests", R"({"request_ids": "x"})").first == 400));
  // Paused in keep mode, the request waits in the queue until it is aborted there.
  BOOST_TEST(post("/pause?mode=keep").first == 200);
  std::thread long_generate([this] {
    httplib::Client other{"127.0.0.1", port};
    other.set_read_timeout(std::chrono::seconds(60));
    auto res = other.Post(
        "/generate", R"({"prompt_token_ids": [1, 2], "max_tokens": 8, "request_id": "rollout-7"})",
        "application/json");
    BOOST_REQUIRE(res);
    BOOST_TEST(json::parse(res->body)["finish_reason"] == "abort");
  });
  Reply aborted;
  for (int i = 0; i < 500; ++i) {
    auto [_, health] = get("/health");
    if (health["requests_in_flight"] == 1) {
      aborted = post("/abort_requests", R"({"request_ids": ["rollout-7", "unknown"]})");
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  long_generate.join();
  // vLLM counts the ids it was given, known or not.
  BOOST_TEST((aborted == Reply{200, {{"status", "aborted"}, {"aborted", 2}}}));
  BOOST_TEST(post("/resume").first == 200);

  // Paused in abort or wait mode, new requests get vLLM 0.34's 503; in keep they queue.
  const std::string request = R"({"prompt_token_ids": [1, 2], "max_tokens": 2})";
  for (const char* mode : {"abort", "wait"}) {
    BOOST_TEST(post(std::string("/pause?mode=") + mode).first == 200);
    auto [status, body] = post("/generate", request);
    BOOST_TEST(status == 503);
    BOOST_TEST(body["error"]["message"] == "Generation is paused. Please retry after it resumes.");
    auto completion =
        http.Post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2})", "application/json");
    BOOST_REQUIRE(completion);
    BOOST_TEST(completion->status == 503);
    BOOST_TEST(post("/resume").first == 200);
  }
  BOOST_TEST(post("/pause?mode=keep").first == 200);
  std::thread queued([this, &request] {
    httplib::Client other{"127.0.0.1", port};
    auto res = other.Post("/generate", request, "application/json");
    BOOST_REQUIRE(res);
    BOOST_TEST(res->status == 200);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  BOOST_TEST(post("/resume").first == 200);
  queued.join();

  // The trainer connection stays while an update is open.
  BOOST_TEST(post("/init_weight_transfer_engine", R"({"init_info": {}})").first == 200);
  BOOST_TEST(post("/start_weight_update").first == 200);
  auto [refused, why] = post("/shutdown_weight_transfer_engine");
  BOOST_TEST(refused == 500);
  BOOST_TEST(why["error"]["message"] ==
             "Cannot release a trainer connection during a weight update");
  BOOST_TEST(post("/shutdown_weight_transfer_engine", R"({"abort_update": "yes"})").first == 400);
  // hotswap's extension: a trainer whose round failed after the bytes landed ends the session.
  BOOST_TEST(post("/shutdown_weight_transfer_engine", R"({"abort_update": true})").first == 200);
  BOOST_TEST(get("/health").second["weight_update_active"] == false);
  BOOST_TEST(post("/init_weight_transfer_engine", R"({"init_info": {}})").first == 200);
  BOOST_TEST(post("/start_weight_update").first == 200);
  json path = {{"update_info", {{"path", new_ckpt.dir.path.string()}}}};
  BOOST_TEST(post("/update_weights", path.dump()).first == 200);
  BOOST_TEST(post("/finish_weight_update").first == 200);
  BOOST_TEST((post("/shutdown_weight_transfer_engine") ==
              Reply{200, {{"message", "Weight transfer shut down"}}}));
}

BOOST_FIXTURE_TEST_CASE(bad_requests_are_400s_and_wrong_order_500s_as_in_vllm_034, Fixture) {
  BOOST_TEST(post("/init_weight_transfer_engine", "{not json").first == 400);
  BOOST_TEST(post("/init_weight_transfer_engine", "{not json").second["detail"] ==
             "Invalid JSON format");
  auto [s1, b1] = post("/init_weight_transfer_engine", "{}");
  BOOST_TEST(s1 == 400);
  BOOST_TEST(b1["detail"] == "Missing 'init_info' in request body");
  BOOST_TEST(post("/init_weight_transfer_engine", "[1]").second["detail"] ==
             "Request body must be a JSON object");
  BOOST_TEST(post("/init_weight_transfer_engine", R"({"init_info": 3})").first == 400);
  BOOST_TEST(post("/update_weights", "{}").second["detail"] ==
             "Missing 'update_info' in request body");
  auto [s2, b2] = post("/pause?mode=sideways");
  BOOST_TEST(s2 == 400);
  BOOST_TEST(b2["error"]["param"] == "query.mode");
  // Query booleans read as FastAPI reads them; anything else is refused by name.
  BOOST_TEST((get("/get_world_size?include_dp=0") == Reply{200, {{"world_size", 1}}}));
  auto [s3, b3] = get("/get_world_size?include_dp=maybe");
  BOOST_TEST(s3 == 400);
  BOOST_TEST(b3["error"]["param"] == "query.include_dp");
  BOOST_TEST(b3["detail"] == "`include_dp` must be true or false, got string \"maybe\"");
  // A string field keeps its text: `mode=on` is a bad pause mode, not the boolean true.
  auto [s4, b4] = post("/pause?mode=on");
  BOOST_TEST(s4 == 400);
  BOOST_TEST(b4["detail"] == "Invalid pause mode 'on': expected abort, wait or keep");
  BOOST_TEST(get("/is_paused").second["is_paused"] == false);  // no state change
  BOOST_TEST(post("/update_weights", R"({"update_info": {"path": "/x"}})").first == 500);
  BOOST_TEST(post("/finish_weight_update").first == 500);
  BOOST_TEST(post("/weight_checker", R"({"action": "explode"})").first == 400);
  // The worker is still there and serving.
  BOOST_TEST(get("/health").first == 200);
}

BOOST_FIXTURE_TEST_CASE(metrics_count_weight_operations_but_not_rejected_input, Fixture) {
  post("/init_weight_transfer_engine", "{}");  // rejected input: no metric
  post("/init_weight_transfer_engine", R"({"init_info": {}})");
  post("/start_weight_update");
  post("/update_weights", json({{"update_info", {{"path", new_ckpt.dir.path.string()}}}}).dump());
  post("/finish_weight_update", R"({"weight_version": "v9"})");
  post("/finish_weight_update");  // wrong order: an error
  auto res = http.Get("/metrics");
  BOOST_REQUIRE(res);
  BOOST_TEST(res->status == 200);
  const std::string& text = res->body;
  auto has = [&](const std::string& line) {
    bool found = text.find(line) != std::string::npos;
    if (!found) BOOST_TEST_MESSAGE("missing metric line: " << line << "\n" << text);
    return found;
  };
  // vLLM 0.34: a histogram with its buckets and the in-flight gauge; its outcome counter went,
  // and lives on under hotswap's name.
  BOOST_TEST(has("# TYPE vllm:rl_weight_update_operation_duration_seconds histogram"));
  BOOST_TEST(
      has("vllm:rl_weight_update_operation_duration_seconds_bucket{operation=\"update\","
          "le=\"0.01\"}"));
  BOOST_TEST(
      has("vllm:rl_weight_update_operation_duration_seconds_bucket{operation=\"update\","
          "le=\"600.0\"} 1"));
  BOOST_TEST(
      has("vllm:rl_weight_update_operation_duration_seconds_bucket{operation=\"finish\","
          "le=\"+Inf\"} 2"));
  BOOST_TEST(has("vllm:rl_weight_update_operation_duration_seconds_count{operation=\"update\"} 1"));
  BOOST_TEST(has("vllm:rl_weight_update_operations_in_flight{operation=\"update\"} 0"));
  BOOST_TEST(!has("vllm:rl_weight_update_operations_total"));
  BOOST_TEST(!has("set_version"));
  BOOST_TEST(
      has("hotswap_weight_update_operations_total{operation=\"init\",status=\"success\"} 1"));
  BOOST_TEST(
      has("hotswap_weight_update_operations_total{operation=\"finish\",status=\"error\"} 1"));
  BOOST_TEST(has("hotswap_weight_version_info{version=\"v9\"} 1"));
  BOOST_TEST(!has("hotswap_weight_bytes_received_total 0\n"));
  // Every line a scraper can read: samples used to run together on one line.
  BOOST_TEST(testing::malformed_metric_lines(text).empty(), text);
  BOOST_TEST(!has("hotswap_tensor_parallel_rank"));  // tp = 1: no per-rank family
}

BOOST_AUTO_TEST_SUITE_END()
