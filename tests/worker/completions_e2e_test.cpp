// vLLM's OpenAI-compatible routes on a real hotswap-worker process: /v1/models and
// /v1/completions in vLLM's shapes, whole and streamed as server-sent events, vLLM's errors and
// status codes for bad input, the same operations over ZeroMQ, vLLM's serving metrics, and 64
// streams (and 32 chat streams) served while a trainer pushes rounds into the worker.
#include <boost/test/unit_test.hpp>

#include <httplib.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <set>
#include <thread>

#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "trainer_sdk/gloo_trainer_init_info.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "trainer_sdk/tensor_list_source.hpp"
#include "trainer_sdk/weight_transfer_trainer_factory.hpp"
#include "trainer_sdk/zmq_weight_sync_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/raw_connection.hpp"
#include "worker/rpc_error.hpp"
#include "worker/sse_events.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using nlohmann::json;
using testing::CheckpointDir;
using testing::rpc_error;
using testing::sse_events;
using testing::WorkerProcess;

namespace {

const std::string kQwen2 = std::string(HOTSWAP_GOLDEN_DIR) + "/tokenizer/qwen2/";

struct Fixture {
  CheckpointDir ckpt{testing::tiny_text_config(), 7};
  int port = transport::pick_free_port();
  std::unique_ptr<WorkerProcess> worker;

  explicit Fixture(std::vector<std::string> extra = {}) {
    std::filesystem::copy_file(kQwen2 + "tokenizer.json", ckpt.dir.path / "tokenizer.json");
    // A chat template too, for the chat streams under pushes.
    std::ofstream(ckpt.dir.path / "tokenizer_config.json")
        << json({{"chat_template",
                  "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                  "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}})
               .dump();
    worker = testing::openai_worker(ckpt.dir.path, port, extra);
  }
  httplib::Result post(const json& body) {
    httplib::Client http("127.0.0.1", port);
    http.set_read_timeout(60s);
    return http.Post("/v1/completions", body.dump(), "application/json");
  }
  json completion(const json& body) {
    auto res = post(body);
    BOOST_REQUIRE(res);
    BOOST_REQUIRE_MESSAGE(res->status == 200, res->body);
    return json::parse(res->body);
  }
};

// An HTTP/1.1 POST of a JSON body, as bytes for a RawConnection.
std::string post_request(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// What one streamed choice added up to.
struct StreamedChoice {
  std::string text;
  std::vector<std::int64_t> token_ids;
  std::int64_t tokens_with_versions = 0;
  std::set<std::string> versions;
  std::string finish_reason;
};

std::map<int, StreamedChoice> add_up(const std::vector<std::string>& events) {
  std::map<int, StreamedChoice> out;
  for (const auto& e : events) {
    if (e == "[DONE]") continue;
    const json chunk = json::parse(e);
    // A text completion's chunks, or a chat's (whose text is each choice's delta).
    const bool chat = chunk["object"] == "chat.completion.chunk";
    BOOST_TEST((chat || chunk["object"] == "text_completion"));
    if (!chat) BOOST_TEST(chunk.contains("usage"));
    for (const auto& c : chunk["choices"]) {
      auto& choice = out[c["index"].get<int>()];
      choice.text += chat ? c["delta"].value("content", "") : c["text"].get<std::string>();
      if (c.contains("token_ids") && c["token_ids"].is_array()) {
        for (auto id : c["token_ids"])
          choice.token_ids.push_back(id);
      }
      // vLLM 0.34: only a choice's last chunk carries its spans, over the whole output.
      const json versions = c.value("weight_versions", json());
      if (c["finish_reason"].is_null()) BOOST_TEST(versions.is_null());
      if (!versions.is_array()) continue;
      for (const auto& span : versions) {
        choice.tokens_with_versions +=
            span["end"].get<std::int64_t>() - span["start"].get<std::int64_t>();
        choice.versions.insert(span["version"].get<std::string>());
      }
      if (!c["finish_reason"].is_null()) choice.finish_reason = c["finish_reason"];
    }
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(completions_e2e)

BOOST_FIXTURE_TEST_CASE(models_and_a_whole_completion_have_vllms_shapes, Fixture) {
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/v1/models");
  BOOST_REQUIRE(res);
  BOOST_TEST(res->status == 200);
  const json models = json::parse(res->body);
  BOOST_TEST(models["object"] == "list");
  BOOST_TEST(models["data"][0]["id"] == "tiny");
  BOOST_TEST(models["data"][0]["object"] == "model");
  BOOST_TEST(models["data"][0]["owned_by"] == "vllm");
  BOOST_TEST(models["data"][0]["max_model_len"] == 512);
  BOOST_TEST(models["data"][0]["permission"][0]["object"] == "model_permission");

  const json r = completion({{"model", "tiny"},
                             {"prompt", "Hello world"},
                             {"max_tokens", 6},
                             {"temperature", 0},
                             {"ignore_eos", true},
                             {"logprobs", 2},
                             {"return_token_ids", true},
                             {"return_weight_versions", true}});
  BOOST_TEST(r["id"].get<std::string>().starts_with("cmpl-"));
  BOOST_TEST(r["object"] == "text_completion");
  BOOST_TEST(r["model"] == "tiny");
  const json& c = r["choices"][0];
  BOOST_TEST(c["index"] == 0);
  BOOST_TEST(c["finish_reason"] == "length");
  BOOST_TEST(c["stop_reason"].is_null());
  BOOST_TEST(c["token_ids"].size() == 6u);
  BOOST_TEST(c["logprobs"]["tokens"].size() == 6u);
  BOOST_TEST(c["logprobs"]["top_logprobs"][0].size() <= 3u);
  BOOST_TEST(c["logprobs"]["text_offset"][0] == 0);
  BOOST_TEST(c["weight_versions"] ==
             json::parse(R"([{"version": "default", "start": 0, "end": 6}])"));
  BOOST_TEST(r["usage"]["completion_tokens"] == 6);
  BOOST_TEST(r["usage"]["prompt_tokens"] == c["prompt_token_ids"].size());
  BOOST_TEST(r["usage"]["total_tokens"] ==
             r["usage"]["prompt_tokens"].get<int>() + r["usage"]["completion_tokens"].get<int>());
  // The text is the detokenized ids, the same as /detokenize says.
  res = http.Post("/detokenize", json({{"tokens", c["token_ids"]}}).dump(), "application/json");
  BOOST_TEST(json::parse(res->body)["prompt"] == c["text"]);
  // Ids in, the same ids out: a prompt of token ids is the same prompt.
  const json by_ids = completion({{"prompt", c["prompt_token_ids"]},
                                  {"max_tokens", 6},
                                  {"temperature", 0},
                                  {"ignore_eos", true},
                                  {"return_token_ids", true},
                                  {"return_tokens_as_token_ids", true},
                                  {"logprobs", 0}});
  BOOST_TEST(by_ids["choices"][0]["token_ids"] == c["token_ids"]);
  BOOST_TEST(by_ids["choices"][0]["logprobs"]["tokens"][0] ==
             "token_id:" + std::to_string(c["token_ids"][0].get<int>()));
}

BOOST_FIXTURE_TEST_CASE(batches_n_echo_stop_strings_and_seeds, Fixture) {
  // A batch of two prompts, n=2 each: choices numbered prompt * n + i; the same seed gives the
  // same samples again.
  const json batch = {{"prompt", {"Hi there", {5, 6, 7}}},
                      {"n", 2},
                      {"max_tokens", 5},
                      {"seed", 11},
                      {"ignore_eos", true}};
  const json r = completion(batch);
  BOOST_TEST(r["choices"].size() == 4u);
  for (int i = 0; i < 4; ++i)
    BOOST_TEST(r["choices"][i]["index"] == i);
  BOOST_TEST(completion(batch)["choices"] == r["choices"]);
  BOOST_TEST(r["usage"]["completion_tokens"] == 20);

  // echo: the prompt's text first; with logprobs, the prompt's (the first token's is null).
  const json echoed = completion({{"prompt", "Hello"},
                                  {"echo", true},
                                  {"max_tokens", 3},
                                  {"logprobs", 1},
                                  {"ignore_eos", true}});
  const json& e = echoed["choices"][0];
  BOOST_TEST(e["text"].get<std::string>().starts_with("Hello"));
  BOOST_TEST(e["logprobs"]["token_logprobs"][0].is_null());
  BOOST_TEST(e["logprobs"]["top_logprobs"][0].is_null());
  BOOST_TEST(!e["logprobs"]["token_logprobs"][1].is_null());
  const json echo_only = completion({{"prompt", "Hello"}, {"echo", true}, {"max_tokens", 0}});
  BOOST_TEST(echo_only["choices"][0]["text"] == "Hello");
  BOOST_TEST(echo_only["usage"]["completion_tokens"] == 0);

  // A stop string: the text ends before it, stop_reason names it, and a longer run without it
  // continues past.
  const json free_run = completion(
      {{"prompt", "Hello"}, {"max_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}});
  const std::string text = free_run["choices"][0]["text"];
  BOOST_REQUIRE_GE(text.size(), 4u);
  const std::string stop = text.substr(2, 2);
  const json stopped = completion({{"prompt", "Hello"},
                                   {"max_tokens", 24},
                                   {"temperature", 0},
                                   {"ignore_eos", true},
                                   {"stop", {stop}}});
  const json& s = stopped["choices"][0];
  BOOST_TEST(s["finish_reason"] == "stop");
  BOOST_TEST(s["stop_reason"] == stop);
  BOOST_TEST(s["text"] == text.substr(0, text.find(stop)));
  const json kept = completion({{"prompt", "Hello"},
                                {"max_tokens", 24},
                                {"temperature", 0},
                                {"ignore_eos", true},
                                {"stop", stop},
                                {"include_stop_str_in_output", true}});
  BOOST_TEST(kept["choices"][0]["text"] == text.substr(0, text.find(stop) + stop.size()));
  // A stop token ends it too; its id is the stop_reason.
  const json ids_run = completion({{"prompt", "Hello"},
                                   {"max_tokens", 8},
                                   {"temperature", 0},
                                   {"ignore_eos", true},
                                   {"return_token_ids", true}});
  const auto third = ids_run["choices"][0]["token_ids"][2];
  const json by_token = completion({{"prompt", "Hello"},
                                    {"max_tokens", 8},
                                    {"temperature", 0},
                                    {"ignore_eos", true},
                                    {"stop_token_ids", {third}},
                                    {"return_token_ids", true}});
  BOOST_TEST(by_token["choices"][0]["finish_reason"] == "stop");
  BOOST_TEST(by_token["choices"][0]["stop_reason"] == third);
  BOOST_TEST(by_token["choices"][0]["token_ids"].back() == third);
}

BOOST_FIXTURE_TEST_CASE(a_stream_is_server_sent_events_ending_in_done, Fixture) {
  const json whole = completion({{"prompt", "Hello"},
                                 {"max_tokens", 12},
                                 {"temperature", 0},
                                 {"ignore_eos", true},
                                 {"return_token_ids", true}});
  // Delivered piece by piece as tokens come, not in one write at the end.
  httplib::Client http("127.0.0.1", port);
  http.set_read_timeout(60s);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = json({{"prompt", "Hello"},
                   {"max_tokens", 12},
                   {"temperature", 0},
                   {"ignore_eos", true},
                   {"return_token_ids", true},
                   {"return_weight_versions", true},
                   {"stream", true},
                   {"stream_options", {{"include_usage", true}}}})
                 .dump();
  req.set_header("Content-Type", "application/json");
  std::string body;
  int deliveries = 0;
  req.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    body.append(data, size);
    ++deliveries;
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  BOOST_REQUIRE(http.send(req, res, error));
  BOOST_TEST(res.status == 200);
  BOOST_TEST(res.get_header_value("Content-Type").starts_with("text/event-stream"));
  BOOST_TEST(deliveries > 1);
  const auto events = sse_events(body);
  auto choices = add_up(events);
  BOOST_TEST(choices[0].text == whole["choices"][0]["text"]);
  BOOST_TEST(json(choices[0].token_ids) == whole["choices"][0]["token_ids"]);
  BOOST_TEST(choices[0].tokens_with_versions == 12);
  BOOST_TEST(choices[0].finish_reason == "length");
  // The usage chunk comes last, with no choices.
  const json usage = json::parse(events[events.size() - 2]);
  BOOST_TEST(usage["choices"].empty());
  BOOST_TEST(usage["usage"]["completion_tokens"] == 12);
}

// A client that reads nothing for a while: the scheduler's thread, which sends each token's
// event itself while the connection keeps up, finds the socket full, leaves the rest to the
// request's handler thread, and every event still arrives once, whole and in order.
BOOST_FIXTURE_TEST_CASE(a_stream_to_a_client_that_reads_late_arrives_whole_and_in_order, Fixture) {
  // 16 choices of 200 tokens with 20 logprobs a token, each echoing a 200-token prompt with its
  // logprobs: about 8 MB of events, more than the server's socket buffer grows to (4 MB at most
  // here), so while this client reads nothing (its small receive buffer, set before connecting,
  // keeps the window small) an offer finds the socket full.
  std::vector<std::int64_t> prompt;
  for (int i = 0; i < 200; ++i)
    prompt.push_back(3 + (i * 37) % 500);
  const json request = {{"prompt", prompt},
                        {"max_tokens", 200},
                        {"temperature", 1.0},
                        {"seed", 7},
                        {"ignore_eos", true},
                        {"n", 16},
                        {"echo", true},
                        {"logprobs", 20},
                        {"return_token_ids", true},
                        {"return_weight_versions", true}};
  const json whole = completion(request);
  json streamed_request = request;
  streamed_request["stream"] = true;
  const std::string body = streamed_request.dump();
  testing::RawConnection client(port, 4096);
  BOOST_REQUIRE(client.send(post_request("/v1/completions", body)));
  std::this_thread::sleep_for(1500ms);
  const std::string got = client.read_until("\r\n0\r\n\r\n", 120s);
  // The chunked body, unframed.
  std::size_t at = got.find("\r\n\r\n");
  BOOST_REQUIRE(at != std::string::npos);
  at += 4;
  std::string events;
  for (;;) {
    const auto line = got.find("\r\n", at);
    BOOST_REQUIRE(line != std::string::npos);
    const std::size_t size = std::stoul(got.substr(at, line - at), nullptr, 16);
    if (size == 0) break;
    events += got.substr(line + 2, size);
    at = line + 2 + size + 2;
  }
  auto choices = add_up(sse_events(events));
  for (int i = 0; i < 16; ++i) {
    BOOST_TEST(choices[i].text == whole["choices"][i]["text"]);
    BOOST_TEST(json(choices[i].token_ids) == whole["choices"][i]["token_ids"]);
    BOOST_TEST(choices[i].finish_reason == "length");
  }
}

// A client that hangs up mid-stream: the next event the scheduler's thread offers (or the
// handler's check for a gone client) fails, and every choice of the run ends as aborted instead
// of generating on for nobody.
BOOST_FIXTURE_TEST_CASE(a_client_that_hangs_up_mid_stream_aborts_its_run, Fixture) {
  const json request = {{"prompt", {1, 2, 3}}, {"max_tokens", 480},  {"temperature", 1.0},
                        {"seed", 3},           {"ignore_eos", true}, {"n", 16},
                        {"stream", true}};
  {
    testing::RawConnection client(port);
    BOOST_REQUIRE(client.send(post_request("/v1/completions", request.dump())));
    BOOST_REQUIRE(client.read_until("data: ", 30s).find("data: ") != std::string::npos);
  }  // closed after the first event, long before 16 × 480 tokens
  httplib::Client http("127.0.0.1", port);
  const std::string aborted =
      "vllm:request_success_total{model_name=\"tiny\",engine=\"0\",finished_reason=\"abort\"} 16";
  const std::string idle = "vllm:num_requests_running{model_name=\"tiny\",engine=\"0\"} 0";
  std::string metrics;
  for (int i = 0; i < 100; ++i) {
    auto res = http.Get("/metrics");
    BOOST_REQUIRE(res);
    metrics = res->body;
    if (metrics.find(aborted) != std::string::npos && metrics.find(idle) != std::string::npos)
      break;
    std::this_thread::sleep_for(100ms);
  }
  BOOST_TEST(metrics.find(aborted) != std::string::npos, metrics);
  BOOST_TEST(metrics.find(idle) != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(bad_requests_get_vllms_errors_and_the_worker_goes_on, Fixture) {
  auto refused = [&](const std::string& body, int status, const std::string& type,
                     const std::string& message) {
    httplib::Client http("127.0.0.1", port);
    auto res = http.Post("/v1/completions", body, "application/json");
    BOOST_REQUIRE(res);
    BOOST_TEST(res->status == status, body);
    const json error = json::parse(res->body)["error"];
    BOOST_TEST(error["type"] == type, body);
    BOOST_TEST(error["code"] == status);
    BOOST_TEST(error["message"].get<std::string>().find(message) != std::string::npos,
               error["message"]);
  };
  refused("{not json", 400, "BadRequestError", "not valid JSON");
  refused(R"({"max_tokens": 4})", 400, "BadRequestError",
          "Either prompt or prompt_embeds must be provided");
  refused(R"({"prompt": ""})", 400, "BadRequestError", "must be provided and non-empty");
  refused(R"({"prompt": "a", "max_tokens": "four"})", 400, "BadRequestError",
          "`max_tokens` must be an integer");
  refused(R"({"prompt": 3})", 400, "BadRequestError", "`prompt` must be a string");
  refused(R"({"prompt": "a", "n": 2, "temperature": 0})", 400, "BadRequestError",
          "n must be 1 when using greedy sampling, got 2.");
  refused(R"({"prompt": "a", "n": 100000})", 400, "BadRequestError", "n must be at most 16384");
  refused(R"({"prompt": "a", "logprobs": 50})", 400, "BadRequestError",
          "Requested sample logprobs of 50, which is greater than max allowed: 20");
  refused(R"({"prompt": "a", "model": "other"})", 404, "NotFoundError",
          "The model `other` does not exist.");
  refused(json({{"prompt", std::vector<int>(600, 5)}}).dump(), 400, "BadRequestError",
          "This model's maximum context length is 512 tokens. However, your request has 600");
  refused(R"({"prompt": [1, 2], "max_tokens": 511})", 400, "BadRequestError",
          "'max_tokens' or 'max_completion_tokens' is too large: 511");
  refused(R"({"prompt": [1, 9999]})", 400, "BadRequestError", "9999");
  // More sequences than can ever be queued: no retry succeeds, so a 400 naming the limit rather
  // than a 503.
  refused(R"({"prompt": "a", "n": 16384})", 400, "BadRequestError",
          "more than the 4096 this worker can queue at once (--max-queued-requests)");
  // A text far past the context is refused without tokenizing all of it.
  const auto begin = std::chrono::steady_clock::now();
  refused(json({{"prompt", std::string(8u << 20, 'a')}}).dump(), 400, "BadRequestError",
          "This model's maximum context length is 512 tokens. However, your request has more");
  BOOST_TEST(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count() < 5.0);
  // An unknown field is accepted and named in the log, as vLLM does.
  auto res = post({{"prompt", "a"}, {"max_tokens", 2}, {"not_a_field", true}});
  BOOST_REQUIRE(res);
  BOOST_TEST(res->status == 200);
  BOOST_TEST(worker->wait_for_output("ignored: {'not_a_field'}", 5s));
  // Still serving.
  BOOST_TEST(completion({{"prompt", "a"}, {"max_tokens", 2}})["choices"].size() == 1u);
}

// Values that pass validation but were 0 in float32 (temperature 1e-300, top_p 1e-300) made
// sampling fail, and the failure ended every sequence in the batch. vLLM raises such a
// temperature to 0.01 and always keeps one top-p token: the request is answered, and a stream
// running beside it finishes.
BOOST_FIXTURE_TEST_CASE(tiny_sampling_values_end_nobody_elses_sequence, Fixture) {
  auto stream = std::async(std::launch::async, [this] {
    httplib::Client http("127.0.0.1", port);
    http.set_read_timeout(60s);
    return http.Post(
        "/v1/completions",
        json({{"prompt", "Once"}, {"max_tokens", 200}, {"stream", true}, {"ignore_eos", true}})
            .dump(),
        "application/json");
  });
  std::this_thread::sleep_for(200ms);
  for (const json& odd : {json{{"temperature", 1e-300}}, json{{"temperature", 1e-40}},
                          json{{"top_p", 1e-300}}, json{{"min_p", 1.0}}}) {
    json body = {{"prompt", "Hi"}, {"max_tokens", 4}};
    body.update(odd);
    const json reply = completion(body);
    BOOST_TEST(reply["choices"][0]["finish_reason"] == "length", odd.dump());
  }
  auto res = stream.get();
  BOOST_REQUIRE(res);
  BOOST_TEST(res->status == 200);
  BOOST_TEST(res->body.find("data: [DONE]") != std::string::npos);
  BOOST_TEST(res->body.find("\"error\"") == std::string::npos, res->body.substr(0, 400));
}

BOOST_FIXTURE_TEST_CASE(the_same_operations_over_zeromq, Fixture) {
  trainer_sdk::RpcClient client(worker->endpoint(), 30s);
  const json body = {{"prompt", "Hello"},
                     {"max_tokens", 5},
                     {"temperature", 0},
                     {"ignore_eos", true},
                     {"return_token_ids", true}};
  const json over_zmq = client.call("completions", body);
  BOOST_TEST(over_zmq["choices"][0]["token_ids"] == completion(body)["choices"][0]["token_ids"]);
  BOOST_TEST(client.call("models")["data"][0]["id"] == "tiny");
  auto [code, message] = rpc_error(client, "completions", {{"prompt", "a"}, {"stream", true}});
  BOOST_TEST(code == -32602);
  BOOST_TEST(message.find("over ZeroMQ a completion comes back whole") != std::string::npos);
  std::tie(code, message) = rpc_error(client, "completions", {{"prompt", "a"}, {"n", 0}});
  BOOST_TEST(code == -32602);
  BOOST_TEST(message.find("n must be at least 1") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(metrics_count_requests_and_tokens_under_vllms_names, Fixture) {
  completion({{"prompt", {1, 2, 3}}, {"max_tokens", 4}, {"ignore_eos", true}});
  httplib::Client http("127.0.0.1", port);
  auto res = http.Get("/metrics");
  BOOST_REQUIRE(res);
  for (const char* line :
       {"vllm:prompt_tokens_total{model_name=\"tiny\",engine=\"0\"} 3",
        "vllm:generation_tokens_total{model_name=\"tiny\",engine=\"0\"} 4",
        "vllm:request_success_total{model_name=\"tiny\",engine=\"0\",finished_reason=\"length\"} 1",
        "vllm:num_requests_running{model_name=\"tiny\",engine=\"0\"} 0",
        "vllm:num_requests_waiting{model_name=\"tiny\",engine=\"0\"} 0",
        "vllm:time_to_first_token_seconds_count{model_name=\"tiny\",engine=\"0\"} 1",
        "# TYPE vllm:e2e_request_latency_seconds histogram",
        "# TYPE vllm:rl_weight_update_operations_in_flight gauge"}) {
    BOOST_TEST(res->body.find(line) != std::string::npos, line);
  }
}

BOOST_AUTO_TEST_SUITE_END()

namespace {

struct PushFixture : Fixture {
  PushFixture()
      : Fixture({"--weight-transfer-config", R"({"backend": "gloo"})", "--max-num-seqs", "64"}) {}
  CheckpointDir other{testing::tiny_text_config(), 8};
};

std::shared_ptr<trainer_sdk::TensorListSource> source_of(const CheckpointDir& ckpt) {
  std::vector<std::pair<std::string, at::Tensor>> t;
  for (auto& [name, tensor] : ckpt.tensors())
    t.emplace_back(name, tensor);
  return std::make_shared<trainer_sdk::TensorListSource>(t);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(completions_under_weight_pushes)

// RL's loop: rollouts stream while the trainer pushes new weights. `streams` requests to `path`
// (`body(i)` the i-th), rounds pushed from once all are in until all are done (at least two):
// every stream finishes, every token says which version produced it, and nothing hangs.
void streams_finish_while_a_trainer_pushes(PushFixture& f, int streams, std::int64_t tokens,
                                           const std::string& path,
                                           const std::function<json(int)>& body) {
  std::atomic<int> finished{0};
  // Boost.Test's checks are not thread-safe: the clients only keep what they got.
  std::vector<std::string> bodies(streams);
  std::vector<std::string> failures(streams);
  std::vector<std::thread> clients;
  // Joined on every way out: a failed call below must not leave them running (terminate).
  struct JoinAll {
    std::vector<std::thread>& threads;
    ~JoinAll() {
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } join_all{clients};
  for (int i = 0; i < streams; ++i) {
    clients.emplace_back([&, i] {
      try {
        httplib::Client http("127.0.0.1", f.port);
        http.set_read_timeout(120s);
        auto res = http.Post(path, body(i).dump(), "application/json");
        if (!res || res->status != 200) {
          failures[i] = res ? res->body : "no reply: " + httplib::to_string(res.error());
        } else {
          bodies[i] = res->body;
        }
      } catch (const std::exception& e) {
        failures[i] = e.what();
      }
      ++finished;
    });
  }
  auto client = std::make_shared<trainer_sdk::ZmqWeightSyncClient>(f.worker->endpoint(), 60s);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (client->call("health")["requests_in_flight"] != streams &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  trainer_sdk::GlooTrainerInitInfo info("127.0.0.1", transport::pick_free_port(), 2, 0);
  info.timeout = 60s;
  auto engine =
      trainer_sdk::WeightTransferTrainerFactory::trainer_init(info, client, source_of(f.other));
  int rounds = 0;
  while (finished < streams || rounds < 2) {
    engine->push({"round-" + std::to_string(++rounds), /*verify=*/false});
  }
  engine->shutdown();
  for (auto& t : clients)
    t.join();

  std::set<std::string> versions;
  for (int i = 0; i < streams; ++i) {
    BOOST_TEST_CONTEXT("stream " << i) {
      BOOST_TEST(failures[i].empty(), failures[i]);
      if (!failures[i].empty()) continue;
      auto choice = add_up(sse_events(bodies[i]))[0];
      BOOST_TEST(choice.finish_reason == "length");
      BOOST_TEST(choice.tokens_with_versions == tokens);  // every token's version reported
      versions.insert(choice.versions.begin(), choice.versions.end());
    }
  }
  // Streams ran across commits: tokens of the first weights and of pushed rounds were served.
  BOOST_TEST(versions.count("default") == 1u);
  BOOST_TEST(versions.size() >= 2u);
  BOOST_TEST(client->call("health")["requests_in_flight"] == 0);
  if (std::any_of(failures.begin(), failures.end(), [](auto& e) { return !e.empty(); }))
    BOOST_TEST_MESSAGE("worker output:\n" << f.worker->output());
}

BOOST_FIXTURE_TEST_CASE(sixty_four_streams_finish_while_a_trainer_pushes_rounds, PushFixture) {
  streams_finish_while_a_trainer_pushes(*this, 64, 200, "/v1/completions", [](int i) {
    return json({{"prompt", "Request " + std::to_string(i)},
                 {"max_tokens", 200},
                 {"ignore_eos", true},
                 {"seed", i},
                 {"return_weight_versions", true},
                 {"stream", true}});
  });
}

// Chat streams the same: each conversation rendered by the model's template, streamed in chat's
// chunks, its tokens' versions in its last chunk.
BOOST_FIXTURE_TEST_CASE(thirty_two_chat_streams_finish_while_a_trainer_pushes_rounds, PushFixture) {
  streams_finish_while_a_trainer_pushes(*this, 32, 150, "/v1/chat/completions", [](int i) {
    return json({{"messages", {{{"role", "user"}, {"content", "Request " + std::to_string(i)}}}},
                 {"max_completion_tokens", 150},
                 {"ignore_eos", true},
                 {"seed", i},
                 {"return_weight_versions", true},
                 {"stream", true}});
  });
}

BOOST_AUTO_TEST_SUITE_END()
