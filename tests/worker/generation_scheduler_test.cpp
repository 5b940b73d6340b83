// The generation scheduler batches continuously: a request joins the running batch at the next
// step and leaves the step it ends, within --max-num-seqs and --max-num-batched-tokens; a request
// watching its tokens can end itself (a stop string); vLLM's serving metrics count it all.
#include "worker/serving/generation_scheduler.hpp"

#include <boost/test/unit_test.hpp>

#include <atomic>
#include <future>
#include <map>
#include <thread>

#include <ATen/Context.h>
#include <ATen/ops/randn.h>

#include "model_loader/lora/lora_adapter.hpp"
#include "model_loader/model_test_support.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using worker::GenerateOutcome;
using worker::GenerateRequest;
using worker::GenerationScheduler;
using worker::SchedulerLimits;

namespace {

struct Fixture {
  testing::CheckpointDir ckpt{testing::tiny_config(model_loader::architectures::kLlama), 41};
  std::shared_ptr<model_loader::ServableModel> model = ckpt.load();

  // Every token event of every request, in the order the scheduler produced them.
  std::mutex mutex;
  std::vector<std::pair<int, std::size_t>> events;  // (request, tokens it has now)

  GenerateRequest request(int name, std::size_t prompt_tokens, std::int64_t max_tokens) {
    GenerateRequest r;
    for (std::size_t i = 0; i < prompt_tokens; ++i)
      r.prompt_token_ids.push_back(static_cast<std::int64_t>(3 + i));
    r.params.max_tokens = max_tokens;
    r.params.temperature = 0;
    r.on_token = [this, name](const model_loader::Sequence& s, const auto&) {
      std::lock_guard lock(mutex);
      events.emplace_back(name, s.output_tokens().size());
      return true;
    };
    return r;
  }
  // The index of `name`'s event with `tokens` tokens.
  std::size_t when(int name, std::size_t tokens) {
    std::lock_guard lock(mutex);
    for (std::size_t i = 0; i < events.size(); ++i) {
      if (events[i] == std::make_pair(name, tokens)) return i;
    }
    BOOST_FAIL("request " << name << " never had " << tokens << " tokens");
    return 0;
  }
};

// Submits and returns a future of the outcome.
std::future<GenerateOutcome> submit(GenerationScheduler& scheduler, GenerateRequest request) {
  auto promise = std::make_shared<std::promise<GenerateOutcome>>();
  auto future = promise->get_future();
  scheduler.submit(std::move(request), std::chrono::steady_clock::now() + 30s,
                   [promise](GenerateOutcome o) { promise->set_value(std::move(o)); });
  return future;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(generation_scheduler)

BOOST_FIXTURE_TEST_CASE(at_most_max_num_seqs_run_and_the_next_joins_as_one_leaves, Fixture) {
  GenerationScheduler scheduler(
      model, [] { return std::optional<std::string>("v1"); }, SchedulerLimits{2, 2048, 64});
  scheduler.hold();  // all four queue before the first step
  std::vector<std::future<GenerateOutcome>> done;
  done.push_back(submit(scheduler, request(1, 3, 3)));
  done.push_back(submit(scheduler, request(2, 3, 6)));
  done.push_back(submit(scheduler, request(3, 3, 3)));
  done.push_back(submit(scheduler, request(4, 3, 3)));
  scheduler.release();
  for (auto& f : done)
    BOOST_TEST(f.get().result->finish_reason == "length");
  // Request 3 takes request 1's slot the step after 1 ends, while 2 is still running; 4 waits
  // for a slot until 3 or 2 leaves.
  BOOST_TEST(when(3, 1) > when(1, 3));
  BOOST_TEST(when(3, 1) < when(2, 6));
  BOOST_TEST(when(4, 1) > when(3, 3));
}

BOOST_FIXTURE_TEST_CASE(a_request_joins_a_batch_that_is_already_decoding, Fixture) {
  GenerationScheduler scheduler(model, [] { return std::optional<std::string>(); });
  std::promise<void> third_token;
  std::atomic<bool> submitting{false};
  auto long_request = request(1, 4, 40);
  auto watch = long_request.on_token;
  long_request.on_token = [&, watch](const model_loader::Sequence& s, const auto& v) {
    if (s.output_tokens().size() == 3) {
      third_token.set_value();
      // With the scheduler's lock held, until the newcomer is on its way to it: on two cores
      // the stepping thread and its OpenMP team otherwise kept this test's thread off the CPU
      // for the rest of the request (it joined after 36 more steps, seen). Once it waits for the
      // lock, the loop takes no step before it has had it.
      while (!submitting)
        std::this_thread::yield();
      std::this_thread::sleep_for(20ms);
    }
    return watch(s, v);
  };
  auto first = submit(scheduler, std::move(long_request));
  third_token.get_future().wait();
  submitting = true;
  auto second = submit(scheduler, request(2, 4, 2));
  BOOST_TEST(second.get().result->token_ids.size() == 2u);
  BOOST_TEST(first.get().result->token_ids.size() == 40u);
  // The newcomer ran its steps inside the long request's, not after them.
  BOOST_TEST(when(2, 2) < when(1, 40));
}

BOOST_FIXTURE_TEST_CASE(a_step_computes_at_most_max_num_batched_tokens, Fixture) {
  // A budget of 8: two 5-token prefills cannot share a step, but a prefill and a decode can.
  GenerationScheduler scheduler(
      model, [] { return std::optional<std::string>(); }, SchedulerLimits{8, 8, 64});
  scheduler.hold();
  auto a = submit(scheduler, request(1, 5, 4));
  auto b = submit(scheduler, request(2, 5, 4));
  auto big = submit(scheduler, request(3, 12, 2));  // over the budget: runs alone
  scheduler.release();
  a.get();
  b.get();
  BOOST_TEST(big.get().result->token_ids.size() == 2u);
  BOOST_TEST(when(2, 1) == when(1, 2) + 1);  // b prefilled in a's first decode step
  BOOST_TEST(when(3, 1) > when(2, 4));       // the big prompt waited for the batch to empty
}

BOOST_FIXTURE_TEST_CASE(a_watcher_ends_its_request_as_a_stop_string_does, Fixture) {
  worker::ServingMetrics metrics;
  GenerationScheduler scheduler(
      model, [] { return std::optional<std::string>("v7"); }, {}, &metrics);
  auto r = request(1, 3, 10);
  r.on_token = [](const model_loader::Sequence& s, const std::optional<std::string>& version) {
    BOOST_TEST(*version == "v7");
    return s.output_tokens().size() < 4;
  };
  auto outcome = submit(scheduler, std::move(r)).get();
  BOOST_TEST(outcome.result->finish_reason == "stop");
  BOOST_TEST(outcome.result->token_ids.size() == 4u);
  BOOST_TEST(outcome.result->weight_versions.size() == 1u);

  const std::string text = metrics.render("m", scheduler.running(), scheduler.waiting());
  for (const char* line :
       {"vllm:num_requests_running{model_name=\"m\",engine=\"0\"} 0",
        "vllm:prompt_tokens_total{model_name=\"m\",engine=\"0\"} 3",
        "vllm:generation_tokens_total{model_name=\"m\",engine=\"0\"} 4",
        "vllm:request_success_total{model_name=\"m\",engine=\"0\",finished_reason=\"stop\"} 1",
        "vllm:time_to_first_token_seconds_count{model_name=\"m\",engine=\"0\"} 1",
        "vllm:time_per_output_token_seconds_count{model_name=\"m\",engine=\"0\"} 3",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"+Inf\"} 1",
        "vllm:e2e_request_latency_seconds_bucket{model_name=\"m\",engine=\"0\",le=\"7680.0\"} 1"}) {
    BOOST_TEST(text.find(line) != std::string::npos, line);
  }
}

// Three requests in a KV cache of 6 blocks of 4 positions, each needing 5: the scheduler's
// later requests are preempted and recompute, and every request still gets exactly the tokens
// it gets alone, each token reported once, counted once, with its preemptions counted.
BOOST_FIXTURE_TEST_CASE(preempted_requests_recompute_and_report_each_token_once, Fixture) {
  model_loader::ModelOptions small;
  auto shape = model->kv_pool()->shape();
  shape.block_size = 4;
  small.kv_block_size = 4;
  small.kv_cache_memory_bytes = 6 * shape.block_bytes();
  worker::ServingMetrics metrics;
  GenerationScheduler scheduler(
      ckpt.load(small), [] { return std::optional<std::string>("v1"); }, {}, &metrics);
  scheduler.hold();
  std::vector<std::future<GenerateOutcome>> done;
  for (int name = 1; name <= 3; ++name)
    done.push_back(submit(scheduler, request(name, 4 + static_cast<std::size_t>(name), 12)));
  scheduler.release();
  for (int name = 1; name <= 3; ++name) {
    auto outcome = done[static_cast<std::size_t>(name - 1)].get();
    BOOST_TEST_REQUIRE(outcome.result.has_value());
    const auto alone = request(name, 4 + static_cast<std::size_t>(name), 12);
    BOOST_TEST(outcome.result->token_ids ==
               model_loader::generate(*model, {alone.prompt_token_ids}, alone.params)[0].token_ids);
    for (std::size_t tokens = 1; tokens <= 12; ++tokens)
      when(name, tokens);
  }
  BOOST_TEST(events.size() == 36u);  // once per token: a preempted step reports nothing
  const std::string text = metrics.render("m", scheduler.running(), scheduler.waiting());
  BOOST_TEST(text.find("vllm:generation_tokens_total{model_name=\"m\",engine=\"0\"} 36") !=
                 std::string::npos,
             text);
  BOOST_TEST(text.find("vllm:num_preemptions_total{model_name=\"m\",engine=\"0\"} 0\n") ==
                 std::string::npos,
             text);
  BOOST_TEST(
      text.find("vllm:num_preemptions_total{model_name=\"m\",engine=\"0\"} ") != std::string::npos,
      text);
}

// A request through a LoRA adapter runs each step on the adapter served under its name then: a
// new version committed while it runs serves its next token, and its spans say which adapter
// version produced which tokens. An adapter unloaded meanwhile finishes the requests using it.
BOOST_FIXTURE_TEST_CASE(a_request_through_an_adapter_takes_its_new_version_at_the_next_step,
                        Fixture) {
  const std::string q = "model.layers.0.self_attn.q_proj";
  const auto& slot = *model->weight_mapping()->find(q + ".weight");
  const nlohmann::json config = {{"r", 2}, {"lora_alpha", 4}, {"target_modules", {"q_proj"}}};
  auto adapter = [&](int seed) {
    at::manual_seed(seed);
    return model_loader::LoraAdapter::from_tensors(
        model_loader::LoraConfig::from_json(config, 16),
        {{q + ".lora_A.weight", at::randn({2, slot.shape[1]})},
         {q + ".lora_B.weight", at::randn({slot.shape[0], 2})}},
        *model->weight_mapping(), model->device());
  };
  worker::LoraRegistry loras(*model, {true, 2, 16}, "tiny");
  loras.commit("policy", adapter(1), "test", "a1");
  GenerationScheduler scheduler(
      model, [] { return std::optional<std::string>("v1"); }, {}, nullptr, &loras);

  auto through_policy = [&](std::int64_t max_tokens,
                            const std::function<void(std::size_t)>& after_token) {
    auto r = request(1, 3, max_tokens);
    r.lora = loras.find("policy")->adapter;
    r.lora_name = "policy";
    r.on_token = [after_token](const model_loader::Sequence& s, const auto&) {
      after_token(s.output_tokens().size());
      return true;
    };
    return submit(scheduler, std::move(r)).get().result->weight_versions;
  };
  // Committed (as a round's finish commits, between two steps) after the second token.
  auto spans = through_policy(5, [&](std::size_t tokens) {
    if (tokens == 2) loras.commit("policy", adapter(2), "test", "a2");
  });
  BOOST_REQUIRE(spans.size() == 2u);
  BOOST_TEST((spans[0].lora && spans[0].lora_version == "a1" && spans[0].version == "v1"));
  BOOST_TEST((spans[0].start == 0 && spans[0].end == 2));
  BOOST_TEST((spans[1].lora && spans[1].lora_version == "a2"));
  BOOST_TEST((spans[1].start == 2 && spans[1].end == 5));
  // Unloaded after the first token, and another adapter served under the name after the
  // second: the request finishes on the adapter it has.
  spans = through_policy(4, [&](std::size_t tokens) {
    if (tokens == 1) loras.unload("policy");
    if (tokens == 2) loras.commit("policy", adapter(3), "test", "other");
  });
  BOOST_REQUIRE(spans.size() == 1u);
  BOOST_TEST((spans[0].lora_version == "a2" && spans[0].end == 4));
  // The result's JSON: [version, start, end, lora_version] for a request through an adapter.
  worker::GenerateResult result;
  result.weight_versions = spans;
  BOOST_TEST(result.to_json(false)["weight_versions"] ==
             nlohmann::json::parse(R"([["v1", 0, 4, "a2"]])"));
}

BOOST_AUTO_TEST_SUITE_END()
