// vLLM's /v1/chat/completions and /tokenize with `messages` on a real hotswap-worker process:
// the conversation tokenized exactly as transformers tokenizes the template's text (golden
// vectors), the engine run on that prompt, vLLM's chat shapes whole and streamed, chat's
// logprobs, echo and continue_final_message, vLLM's errors, and the same over ZeroMQ.
#include <boost/test/unit_test.hpp>

#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include <nlohmann/json.hpp>

#include "model_loader/model_test_support.hpp"
#include "protocol/errors.hpp"
#include "protocol/jsonrpc.hpp"
#include "trainer_sdk/rpc_client.hpp"
#include "transport/gloo_communicator.hpp"
#include "worker/rpc_error.hpp"
#include "worker/sse_events.hpp"
#include "worker/worker_process.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using json = nlohmann::ordered_json;
using testing::CheckpointDir;
using testing::sse_events;
using testing::WorkerProcess;

namespace {

const std::string kGolden = std::string(HOTSWAP_GOLDEN_DIR);

// The tokenized case of tests/golden/chat_template/golden.json: a ChatML template with tools, a
// conversation, the template's text and transformers' ids for it.
json tokenized_golden() {
  std::ifstream in(kGolden + "/chat_template/golden.json");
  BOOST_REQUIRE(in.good());
  return json::parse(in)["tokenized"];
}

struct Fixture {
  json golden = tokenized_golden();
  CheckpointDir ckpt{testing::tiny_text_config(), 11};
  int port = transport::pick_free_port();
  std::unique_ptr<WorkerProcess> worker;

  // `with_template`: the model's tokenizer_config.json has the golden template.
  explicit Fixture(bool with_template = true, std::vector<std::string> extra = {}) {
    std::filesystem::copy_file(kGolden + "/tokenizer/qwen2/tokenizer.json",
                               ckpt.dir.path / "tokenizer.json");
    json tokenizer_config = {{"eos_token", "<|im_end|>"}};
    if (with_template) tokenizer_config["chat_template"] = golden["template"];
    std::ofstream(ckpt.dir.path / "tokenizer_config.json") << tokenizer_config.dump();
    worker = testing::openai_worker(ckpt.dir.path, port, extra);
  }
  httplib::Result post(const std::string& path, const json& body,
                       const httplib::Headers& headers = {}) {
    httplib::Client http("127.0.0.1", port);
    http.set_read_timeout(60s);
    return http.Post(path, headers, body.dump(), "application/json");
  }
  json ok(const std::string& path, const json& body, const httplib::Headers& headers = {}) {
    auto res = post(path, body, headers);
    BOOST_REQUIRE(res);
    BOOST_REQUIRE_MESSAGE(res->status == 200, res->body);
    return json::parse(res->body);
  }
  // vLLM's error object of a refused request: {status, message}.
  std::pair<int, std::string> refused(const std::string& path, const json& body) {
    auto res = post(path, body);
    BOOST_REQUIRE(res);
    const json error = json::parse(res->body)["error"];
    BOOST_TEST(error["code"] == res->status);
    return {res->status, error["message"].get<std::string>()};
  }
  // The golden conversation, as a chat request.
  json chat(json extra = json::object()) const {
    json body = {{"model", "tiny"},
                 {"messages", golden["messages"]},
                 {"tools", golden["tools"]},
                 {"max_tokens", 6},
                 {"temperature", 0}};
    for (auto& [key, value] : extra.items())
      body[key] = value;
    return body;
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(chat_completions_e2e)

// The prompt the engine runs is transformers' tokenization of the template's text, token for
// token, and what it generates is what /v1/completions generates from those ids.
BOOST_FIXTURE_TEST_CASE(a_conversation_becomes_the_prompt_transformers_makes, Fixture) {
  const json tokenized = ok("/tokenize", {{"model", "tiny"},
                                          {"messages", golden["messages"]},
                                          {"tools", golden["tools"]},
                                          {"return_token_strs", true}});
  BOOST_TEST(tokenized["tokens"] == golden["ids"]);
  BOOST_TEST(tokenized["count"] == golden["ids"].size());
  BOOST_TEST(tokenized["token_strs"].size() == golden["ids"].size());

  const json reply = ok("/v1/chat/completions", chat({{"return_token_ids", true}}));
  BOOST_TEST(reply["object"] == "chat.completion");
  BOOST_TEST(reply["id"].get<std::string>().starts_with("chatcmpl-"));
  BOOST_TEST(reply["model"] == "tiny");
  BOOST_TEST(reply["prompt_token_ids"] == golden["ids"]);
  BOOST_TEST(reply["usage"]["prompt_tokens"] == golden["ids"].size());
  BOOST_TEST(reply["usage"]["completion_tokens"] == 6);
  const json& choice = reply["choices"][0];
  BOOST_TEST(choice["finish_reason"] == "length");
  BOOST_TEST(choice["message"]["role"] == "assistant");
  // vLLM's ChatMessage fields, in its order; no tool calls parsed, so none listed.
  std::vector<std::string> keys;
  for (auto& [key, value] : choice["message"].items())
    keys.push_back(key);
  BOOST_TEST(keys == (std::vector<std::string>{"role", "content", "refusal", "annotations", "audio",
                                               "function_call", "reasoning"}),
             boost::test_tools::per_element());
  BOOST_TEST(choice["logprobs"].is_null());

  const json completion = ok("/v1/completions", {{"model", "tiny"},
                                                 {"prompt", golden["ids"]},
                                                 {"max_tokens", 6},
                                                 {"temperature", 0},
                                                 {"return_token_ids", true}});
  BOOST_TEST(choice["token_ids"] == completion["choices"][0]["token_ids"]);
  BOOST_TEST(choice["message"]["content"] == completion["choices"][0]["text"]);

  // The X-Request-Id header names the completion, as vLLM's.
  const json named = ok("/v1/chat/completions", chat(), {{"X-Request-Id", "abc"}});
  BOOST_TEST(named["id"] == "chatcmpl-abc");
}

BOOST_FIXTURE_TEST_CASE(a_streamed_chat_sends_the_role_the_text_the_finish_and_the_usage, Fixture) {
  const json whole = ok("/v1/chat/completions", chat());
  auto res = post("/v1/chat/completions", chat({{"stream", true},
                                                {"stream_options", {{"include_usage", true}}},
                                                {"return_token_ids", true},
                                                {"return_weight_versions", true}}));
  BOOST_REQUIRE(res);
  BOOST_REQUIRE(res->status == 200);
  const auto events = sse_events(res->body);
  BOOST_REQUIRE(events.size() >= 4);
  const json first = json::parse(events[0]);
  BOOST_TEST(first["object"] == "chat.completion.chunk");
  BOOST_TEST(first["choices"][0]["delta"] == json({{"role", "assistant"}, {"content", ""}}));
  BOOST_TEST(first["prompt_token_ids"] == golden["ids"]);
  std::string text;
  std::vector<std::int64_t> ids;
  json last_choice;
  for (std::size_t i = 1; i + 2 < events.size(); ++i) {
    const json event = json::parse(events[i]);
    BOOST_TEST(event["id"] == first["id"]);
    const json& choice = event["choices"][0];
    text += choice["delta"]["content"].get<std::string>();
    for (auto id : choice["token_ids"])
      ids.push_back(id.get<std::int64_t>());
    last_choice = choice;
  }
  BOOST_TEST(text == whole["choices"][0]["message"]["content"].get<std::string>());
  BOOST_TEST(ids.size() == 6u);
  BOOST_TEST(last_choice["finish_reason"] == "length");
  BOOST_TEST(last_choice["weight_versions"].is_array());
  const json usage = json::parse(events[events.size() - 2]);
  BOOST_TEST(usage["choices"].empty());
  BOOST_TEST(usage["usage"]["completion_tokens"] == 6);
  BOOST_TEST(usage["usage"]["prompt_tokens"] == golden["ids"].size());
}

BOOST_FIXTURE_TEST_CASE(logprobs_come_in_chats_shape, Fixture) {
  const json reply = ok("/v1/chat/completions", chat({{"logprobs", true}, {"top_logprobs", 2}}));
  const json& content = reply["choices"][0]["logprobs"]["content"];
  BOOST_REQUIRE(content.size() == 6u);
  for (const auto& position : content) {
    BOOST_TEST(position["logprob"].get<double>() <= 0.0);
    // The bytes are the token's text.
    std::string bytes;
    for (const auto& b : position["bytes"])
      bytes += static_cast<char>(b.get<int>());
    BOOST_TEST(bytes == position["token"].get<std::string>());
    BOOST_REQUIRE(position["top_logprobs"].size() == 2u);
    // The sampled token first (greedy: the likeliest), then the next likeliest.
    BOOST_TEST(position["top_logprobs"][0]["token"] == position["token"]);
    BOOST_TEST(position["top_logprobs"][1]["logprob"].get<double>() <=
               position["top_logprobs"][0]["logprob"].get<double>());
  }
  const json plain = ok("/v1/chat/completions", chat({{"logprobs", true}}));
  BOOST_TEST(plain["choices"][0]["logprobs"]["content"][0]["top_logprobs"].empty());
}

// The reply continues the last message (continue_final_message) and starts with it (echo): its
// role is that message's.
BOOST_FIXTURE_TEST_CASE(a_continued_message_is_echoed_in_its_role, Fixture) {
  json messages = golden["messages"];
  messages.push_back({{"role", "assistant"}, {"content", "The answer is"}});
  const json body = {{"messages", messages},
                     {"add_generation_prompt", false},
                     {"continue_final_message", true},
                     {"echo", true},
                     {"max_tokens", 3},
                     {"temperature", 0}};
  const json reply = ok("/v1/chat/completions", body);
  const std::string content = reply["choices"][0]["message"]["content"];
  BOOST_TEST(content.starts_with("The answer is"));
  BOOST_TEST(reply["choices"][0]["message"]["role"] == "assistant");
  // The prompt ends open, on the message's text: no <|im_end|> after it.
  json tokenize = body;
  tokenize.erase("echo");
  tokenize.erase("max_tokens");
  tokenize.erase("temperature");
  const json ids = ok("/tokenize", tokenize)["tokens"];
  const json text = ok("/detokenize", {{"tokens", ids}});
  BOOST_TEST(text["prompt"].get<std::string>().ends_with("<|im_start|>assistant\nThe answer is"));
}

BOOST_FIXTURE_TEST_CASE(bad_requests_get_vllms_errors_and_the_worker_serves_on, Fixture) {
  auto with = [&](json fields) { return refused("/v1/chat/completions", chat(std::move(fields))); };
  BOOST_TEST(with({{"add_generation_prompt", true}, {"continue_final_message", true}}) ==
             std::make_pair(400, std::string("Cannot set both `continue_final_message` and "
                                             "`add_generation_prompt` to True.")));
  BOOST_TEST(with({{"top_logprobs", 2}}) ==
             std::make_pair(400, std::string("when using `top_logprobs`, `logprobs` must be set "
                                             "to true.")));
  BOOST_TEST(with({{"tool_choice", "required"}}).first == 400);
  BOOST_TEST(with({{"response_format", {{"type", "json_object"}}}}).first == 400);
  BOOST_TEST(with({{"chat_template", "{{ 'mine' }}"}}) ==
             std::make_pair(400, std::string("Chat template is passed with request, but "
                                             "--trust-request-chat-template is not set. Refused "
                                             "request with untrusted chat template.")));
  BOOST_TEST(with({{"model", "other"}}) ==
             std::make_pair(404, std::string("The model `other` does not exist.")));
  BOOST_TEST(
      with({{"messages",
             {{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}}})
          .first == 400);
  // A template that raises: its message, a 400.
  BOOST_TEST(with({{"messages", json::array()}}).first == 400);
  // Still serving, on the same weights.
  BOOST_TEST(ok("/v1/chat/completions", chat())["choices"][0]["finish_reason"] == "length");
}

// A model without a template answers transformers' error; a request's own template is rendered
// only where the worker was told to trust it.
BOOST_AUTO_TEST_CASE(a_request_template_needs_trust_and_a_model_needs_a_template) {
  Fixture untrusted(false);
  BOOST_TEST(untrusted.refused("/v1/chat/completions", untrusted.chat()) ==
             std::make_pair(400, std::string("As of transformers v4.44, default chat template is "
                                             "no longer allowed, so you must provide a chat "
                                             "template if the tokenizer does not define one.")));
  Fixture trusted(false, {"--trust-request-chat-template"});
  const json reply = trusted.ok(
      "/tokenize", {{"messages", {{{"role", "user"}, {"content", "hi"}}}},
                    {"chat_template", "{% for m in messages %}{{ m.content }}{% endfor %}"}});
  const json hi = trusted.ok("/tokenize", {{"prompt", "hi"}, {"add_special_tokens", false}});
  BOOST_TEST(reply["tokens"] == hi["tokens"]);

  // Templates a request may bring: each ends in a 400 that says why, and the worker serves on.
  auto with_template = [&](const std::string& chat_template, json messages) {
    return trusted.refused(
        "/v1/chat/completions",
        {{"messages", std::move(messages)}, {"chat_template", chat_template}, {"max_tokens", 2}});
  };
  const json user = {{{"role", "user"}, {"content", "hi"}}};
  const auto start = std::chrono::steady_clock::now();
  BOOST_TEST(with_template("{% for i in range(100000) %}{% for j in range(100000) %}"
                           "{% endfor %}{% endfor %}",
                           user) ==
             std::make_pair(400, std::string("the chat template did not render within 5 s")));
  BOOST_TEST((std::chrono::steady_clock::now() - start < 20s));
  BOOST_TEST(with_template("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", user) ==
             std::make_pair(400, std::string("the chat template's output is limited to 4194304 "
                                             "characters")));
  BOOST_TEST(with_template("{% for m in messages %}{% if m.role not in ['user', 'assistant'] %}"
                           "{{ raise_exception('unknown role: ' + m.role) }}{% endif %}"
                           "{% endfor %}",
                           {{{"role", "wizard"}, {"content", "hi"}}}) ==
             std::make_pair(400, std::string("unknown role: wizard")));
  BOOST_TEST(with_template("{{ messages[0].content }}", json::array()).first == 400);
  BOOST_TEST(trusted.ok("/v1/chat/completions",
                        {{"messages", user},
                         {"chat_template", "{{ messages[0].content }}"},
                         {"max_tokens", 2}})["choices"][0]["finish_reason"] == "length");
}

// A ZeroMQ client that sends a chat completion and leaves cancels it, as it would a completion:
// held by a paused worker, the chat would otherwise wait until its --timeout.
BOOST_FIXTURE_TEST_CASE(a_zeromq_client_that_leaves_cancels_its_chat, Fixture) {
  trainer_sdk::RpcClient observer(worker->endpoint(), 30s);
  observer.call("pause", {{"mode", "keep"}});
  auto in_flight_becomes = [&](int n, std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (observer.call("health")["requests_in_flight"] != n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(20ms);
    }
    return true;
  };
  {
    zmq::context_t context;
    zmq::socket_t leaving(context, zmq::socket_type::dealer);
    leaving.set(zmq::sockopt::linger, 0);
    leaving.connect(worker->endpoint());
    const std::string frame =
        protocol::make_request(1, "chat_completions",
                               nlohmann::json(chat({{"max_tokens", 290}, {"ignore_eos", true}})))
            .dump();
    std::array<zmq::const_buffer, 2> parts{zmq::const_buffer(nullptr, 0), zmq::buffer(frame)};
    zmq::send_multipart(leaving, parts);
    BOOST_REQUIRE(in_flight_becomes(1, 10s));
  }  // the client closes its socket and leaves
  BOOST_TEST(in_flight_becomes(0, 5s));
  observer.call("resume");
  BOOST_TEST(ok("/v1/chat/completions", chat())["choices"][0]["finish_reason"] == "length");
}

// Over ZeroMQ the same bodies; hotswap's C++ client sends its keys sorted, and the worker renders
// them as sent, so the HTTP request it is compared with sends them sorted too.
BOOST_FIXTURE_TEST_CASE(the_same_over_zeromq, Fixture) {
  trainer_sdk::RpcClient client(worker->endpoint(), 60s);
  const nlohmann::json sorted = nlohmann::json(chat());
  const nlohmann::json over_zmq = client.call("chat_completions", sorted);
  const json over_http = ok("/v1/chat/completions", json(sorted));
  BOOST_TEST(over_zmq["choices"][0]["message"]["content"] ==
             over_http["choices"][0]["message"]["content"].get<std::string>());
  BOOST_TEST(over_zmq["object"] == "chat.completion");
  const nlohmann::json conversation = {{"messages", nlohmann::json(golden["messages"])},
                                       {"tools", nlohmann::json(golden["tools"])}};
  BOOST_TEST(client.call("tokenize", conversation)["tokens"] ==
             nlohmann::json(ok("/tokenize", json(conversation))["tokens"]));
  auto [code, message] =
      testing::rpc_error(client, "chat_completions", nlohmann::json(chat({{"stream", true}})));
  BOOST_TEST(code == protocol::kInvalidParamsCode);
  BOOST_TEST(
      message.starts_with("`stream: true` is served on the HTTP route /v1/chat/completions"));
}

BOOST_AUTO_TEST_SUITE_END()
