#include "model_loader/generation.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/allclose.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/log_softmax.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/topk.h>

#include <array>
#include <cmath>
#include <limits>
#include <map>

#include "model_loader/causal_attention.hpp"
#include "model_test_support.hpp"
#include "protocol/errors.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using model_loader::SamplingParams;

namespace {

const std::vector<std::int64_t> kPrompt = {3, 17, 42, 5, 9};

struct Fixture {
  testing::CheckpointDir ckpt{testing::tiny_config(architectures::kLlama), 300};
  std::shared_ptr<model_loader::ServableModel> model = ckpt.load();
};

SamplingParams sampled(std::uint64_t seed, std::int64_t max_tokens = 12) {
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = seed;
  p.max_tokens = max_tokens;
  return p;
}

// The real model, with one slice's logits turned to NaN: a fault of one sequence that no real
// checkpoint produces on demand, to show that it stays that sequence's.
class PoisonedSlice final : public model_loader::ServableModel {
 public:
  PoisonedSlice(std::shared_ptr<model_loader::ServableModel> inner, std::size_t slice)
      : inner_(std::move(inner)), slice_(slice) {}
  at::Tensor forward(const at::Tensor& tokens, std::vector<model_loader::ForwardSlice>& slices,
                     bool all_positions) const override {
    at::Tensor logits = inner_->forward(tokens, slices, all_positions);
    if (!all_positions && slice_ < slices.size()) {
      logits[static_cast<std::int64_t>(slice_)].fill_(std::numeric_limits<float>::quiet_NaN());
    }
    return logits;
  }
  const model_loader::ModelConfig& config() const override { return inner_->config(); }
  c10::ScalarType dtype() const override { return inner_->dtype(); }
  std::uint64_t runtime_bytes() const override { return inner_->runtime_bytes(); }
  void load_checkpoint(const model_loader::Checkpoint& c) override { inner_->load_checkpoint(c); }
  bool reload_active() const override { return inner_->reload_active(); }
  bool is_dirty() const override { return inner_->is_dirty(); }
  void zero_weights() override { inner_->zero_weights(); }
  std::map<std::string, std::string> runtime_checksums(const std::string& prefix) const override {
    return inner_->runtime_checksums(prefix);
  }
  std::map<std::string, std::string> checkpoint_checksums() const override {
    return inner_->checkpoint_checksums();
  }
  void load_weights(const std::vector<model_loader::NamedTensor>& w) override {
    inner_->load_weights(w);
  }
  void start_reload() override { inner_->start_reload(); }
  void finish_reload() override { inner_->finish_reload(); }
  void abort_reload() override { inner_->abort_reload(); }
  c10::Device device() const override { return inner_->device(); }

 private:
  std::shared_ptr<model_loader::ServableModel> inner_;
  std::size_t slice_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(generation)

// vLLM's rules (sampling_params.py): a temperature in (0, 0.01) is 0.01, one of 0 is greedy and
// turns the filters off. Such values were 0 in float32 and gave NaN probabilities.
BOOST_FIXTURE_TEST_CASE(tiny_temperatures_and_top_p_follow_vllms_rules, Fixture) {
  SamplingParams p = sampled(4, 6);
  p.temperature = 1e-300;
  p.apply_vllm_rules();
  BOOST_TEST(p.temperature == model_loader::kMinTemperature);
  SamplingParams zero = sampled(4, 6);
  zero.temperature = 0;
  zero.top_p = 0.5;
  zero.top_k = 3;
  zero.min_p = 0.2;
  zero.apply_vllm_rules();
  BOOST_TEST((zero.top_p == 1.0 && zero.top_k == 0 && zero.min_p == 0.0));
  // Generation applies them itself: these sample, deterministically, and never fail.
  for (double t : {1e-300, 1e-40, 1e-6}) {
    SamplingParams tiny = sampled(4, 6);
    tiny.temperature = t;
    SamplingParams clamped = sampled(4, 6);
    clamped.temperature = model_loader::kMinTemperature;
    BOOST_TEST(model_loader::generate(*model, {kPrompt}, tiny).at(0).token_ids ==
               model_loader::generate(*model, {kPrompt}, clamped).at(0).token_ids);
  }
  // Non-finite values are refused by name.
  SamplingParams infinite = sampled(1);
  infinite.temperature = std::numeric_limits<double>::infinity();
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {kPrompt}, infinite), protocol::ValueError,
                          "temperature must be a finite number");
}

BOOST_FIXTURE_TEST_CASE(a_sequence_whose_sampling_fails_ends_alone, Fixture) {
  PoisonedSlice poisoned(model, 1);
  model_loader::Sequence a(kPrompt, sampled(1, 5)), b(kPrompt, sampled(2, 5)),
      c(kPrompt, sampled(3, 5));
  std::vector<model_loader::Sequence*> batch{&a, &b, &c};
  model_loader::step(poisoned, batch);
  BOOST_TEST(b.finished());
  BOOST_TEST(*b.finish_reason() == "error");
  BOOST_REQUIRE(b.error().has_value());
  BOOST_TEST(b.error()->find("no valid distribution") != std::string::npos, *b.error());
  // The others go on, alone in the batch from now on, to their end.
  while (!a.finished() || !c.finished())
    model_loader::step(*model, batch);
  BOOST_TEST(*a.finish_reason() == "length");
  BOOST_TEST(*c.finish_reason() == "length");
  BOOST_TEST(a.output_tokens().size() == 5u);
  BOOST_TEST(b.output_tokens().empty());
}

// A prompt attended in chunks of queries gives what one pass over all of them gives, sliding
// window and a cache's earlier keys included; peak memory is the bench's to show.
BOOST_AUTO_TEST_CASE(attention_in_chunks_equals_attention_in_one_pass) {
  const std::int64_t heads = 4, start = 7, len = 37, hd = 16;
  at::Tensor q = at::randn({heads, len, hd});
  at::Tensor k = at::randn({heads, start + len, hd});
  at::Tensor v = at::randn({heads, start + len, hd});
  for (std::optional<std::int64_t> window :
       {std::optional<std::int64_t>{}, std::optional<std::int64_t>{5}}) {
    at::Tensor whole = model_loader::causal_attention(q, k, v, start, 0.25, window);
    for (std::int64_t budget :
         {std::int64_t{1}, heads * (start + len) * 3, heads * (start + len) * 36}) {
      at::Tensor chunked = model_loader::causal_attention(q, k, v, start, 0.25, window, budget);
      BOOST_TEST(at::allclose(whole, chunked, 1e-5, 1e-6), "budget " << budget);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(sampling_is_deterministic_for_a_seed, Fixture) {
  auto a = model_loader::generate(*model, {kPrompt}, sampled(7)).at(0);
  auto b = model_loader::generate(*model, {kPrompt}, sampled(7)).at(0);
  auto c = model_loader::generate(*model, {kPrompt}, sampled(8)).at(0);
  BOOST_TEST(a.token_ids == b.token_ids);
  BOOST_TEST(a.logprobs == b.logprobs);
  BOOST_TEST(a.token_ids != c.token_ids);
  BOOST_TEST(a.finish_reason == "length");
  BOOST_TEST(a.token_ids.size() == 12u);
}

BOOST_FIXTURE_TEST_CASE(greedy_picks_the_argmax_and_reports_raw_logprobs, Fixture) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 6;
  auto result = model_loader::generate(*model, {kPrompt}, greedy).at(0);
  std::vector<std::int64_t> all = kPrompt;
  all.insert(all.end(), result.token_ids.begin(), result.token_ids.end());
  at::Tensor logprobs = at::log_softmax(testing::model_logits(*model, all), -1);
  for (std::size_t i = 0; i < result.token_ids.size(); ++i) {
    auto row = logprobs[static_cast<std::int64_t>(kPrompt.size() + i - 1)];
    BOOST_TEST(at::argmax(row).item<std::int64_t>() == result.token_ids[i]);
    BOOST_TEST(std::abs(row[result.token_ids[i]].item<double>() - result.logprobs[i]) < 1e-5);
  }
  // Scoring the same continuation gives the same logprobs.
  auto scored = model_loader::score(*model, kPrompt, result.token_ids);
  for (std::size_t i = 0; i < scored.size(); ++i) {
    BOOST_TEST(std::abs(scored[i] - result.logprobs[i]) < 1e-5);
  }
}

BOOST_FIXTURE_TEST_CASE(logprobs_are_taken_before_temperature, Fixture) {
  auto hot = sampled(5, 4);
  hot.temperature = 2.5;
  auto result = model_loader::generate(*model, {kPrompt}, hot).at(0);
  auto scored = model_loader::score(*model, kPrompt, result.token_ids);
  for (std::size_t i = 0; i < scored.size(); ++i) {
    BOOST_TEST(std::abs(scored[i] - result.logprobs[i]) < 1e-5);
  }
}

// The likeliest token always stays, however small top_p is: 1e-300 is 0 once compared in
// float32, and used to leave no token at all.
BOOST_FIXTURE_TEST_CASE(a_tiny_top_p_is_greedy, Fixture) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 6;
  for (double top_p : {1e-6, 1e-300}) {
    auto nucleus = sampled(9, 6);
    nucleus.top_p = top_p;
    BOOST_TEST(model_loader::generate(*model, {kPrompt}, nucleus).at(0).token_ids ==
                   model_loader::generate(*model, {kPrompt}, greedy).at(0).token_ids,
               "top_p " << top_p);
  }
}

BOOST_FIXTURE_TEST_CASE(stop_tokens_end_a_sequence_with_reason_stop, Fixture) {
  auto free_run = model_loader::generate(*model, {kPrompt}, sampled(3)).at(0);
  auto params = sampled(3);
  params.stop_token_ids = {free_run.token_ids[4]};
  auto stopped = model_loader::generate(*model, {kPrompt}, params).at(0);
  auto first =
      std::find(free_run.token_ids.begin(), free_run.token_ids.end(), free_run.token_ids[4]) -
      free_run.token_ids.begin();
  BOOST_TEST(stopped.finish_reason == "stop");
  BOOST_TEST(stopped.token_ids.size() == static_cast<std::size_t>(first + 1));
}

BOOST_FIXTURE_TEST_CASE(batched_requests_equal_requests_alone, Fixture) {
  std::vector<std::int64_t> other = {8, 1, 2, 60, 13, 13, 4};
  auto batch = model_loader::generate(*model, {kPrompt, other}, sampled(21, 5));
  BOOST_TEST(batch[0].token_ids ==
             model_loader::generate(*model, {kPrompt}, sampled(21, 5))[0].token_ids);
  BOOST_TEST(batch[1].token_ids ==
             model_loader::generate(*model, {other}, sampled(21, 5))[0].token_ids);
}

BOOST_FIXTURE_TEST_CASE(top_k_one_is_greedy_and_alternatives_are_the_likeliest, Fixture) {
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 6;
  auto expected = model_loader::generate(*model, {kPrompt}, greedy).at(0).token_ids;
  auto params = sampled(5, 6);
  params.top_k = 1;
  BOOST_TEST(model_loader::generate(*model, {kPrompt}, params).at(0).token_ids == expected);
  params.top_k = 0;
  params.min_p = 1.0;  // only tokens as likely as the likeliest
  BOOST_TEST(model_loader::generate(*model, {kPrompt}, params).at(0).token_ids == expected);

  // Alternatives, likeliest first; with echo, the prompt's own logprobs equal score()'s.
  params = sampled(9, 4);
  params.logprobs = 3;
  params.prompt_logprobs = true;
  model_loader::Sequence s(kPrompt, params);
  while (!s.finished())
    model_loader::step(*model, {&s});
  BOOST_REQUIRE_EQUAL(s.output_top_logprobs().size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    const auto& top = s.output_top_logprobs()[i];
    BOOST_REQUIRE_EQUAL(top.size(), 3u);
    BOOST_TEST(top[0].logprob >= top[1].logprob);
    BOOST_TEST(top[1].logprob >= top[2].logprob);
    BOOST_TEST(s.output_logprobs()[i] <= top[0].logprob + 1e-9);
  }
  const std::vector<std::int64_t> rest(kPrompt.begin() + 1, kPrompt.end());
  const auto scored = model_loader::score(*model, {kPrompt.front()}, rest);
  BOOST_REQUIRE_EQUAL(s.prompt_logprobs().size(), rest.size());
  for (std::size_t i = 0; i < rest.size(); ++i) {
    BOOST_TEST(s.prompt_logprobs()[i].token == rest[i]);
    BOOST_TEST(std::abs(s.prompt_logprobs()[i].logprob - scored[i]) < 1e-4);
  }
}

BOOST_FIXTURE_TEST_CASE(bad_requests_are_value_errors, Fixture) {
  auto params = sampled(1);
  params.max_tokens = 0;
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {kPrompt}, params), protocol::ValueError,
                          "max_tokens must be at least 1");
  params = sampled(1);
  params.top_p = 0;
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {kPrompt}, params), protocol::ValueError,
                          "top_p must be in (0, 1]");
  params = sampled(1);
  params.temperature = -1;
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {kPrompt}, params), protocol::ValueError,
                          "temperature must be non-negative");
  params = sampled(1);
  params.top_k = -2;
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {kPrompt}, params), protocol::ValueError,
                          "top_k must be 0 (disable), or at least 1, got -2");
  params = sampled(1);
  params.min_p = 1.5;
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {kPrompt}, params), protocol::ValueError,
                          "min_p must be in [0, 1]");
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {{}}, sampled(1)), protocol::ValueError,
                          "a prompt needs at least one token");
  HOTSWAP_CHECK_THROW_MSG(model_loader::generate(*model, {{1, 64}}, sampled(1)),
                          protocol::ValueError, "token ids must be in 0..63");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(batched_sampling)

// One sampling call over a batch of rows with different parameters gives every row what it
// gets alone: same tokens from the same seeds, same logprobs and alternatives; a NaN row fails
// alone.
BOOST_AUTO_TEST_CASE(a_batch_of_rows_samples_as_each_row_alone) {
  at::manual_seed(3);
  at::Tensor logits = at::randn({6, 50}) * 3;
  logits[4].fill_(std::numeric_limits<float>::quiet_NaN());
  std::vector<SamplingParams> params(6);
  params[0].temperature = 0;  // greedy
  params[1] = sampled(1);
  params[1].top_k = 5;
  params[2] = sampled(2);
  params[2].top_p = 0.6;
  params[2].logprobs = 3;
  params[3] = sampled(3);
  params[3].min_p = 0.2;
  params[3].top_k = 9;
  params[3].top_p = 0.9;
  params[4] = sampled(4);  // the NaN row
  params[5] = sampled(5);
  params[5].logprobs = 7;
  for (auto& p : params)
    p.apply_vllm_rules();
  auto generators = [&] {
    std::vector<at::Generator> g;
    for (std::size_t r = 0; r < params.size(); ++r)
      g.push_back(model_loader::make_cpu_generator(100 + r));
    return g;
  };
  auto batch_generators = generators();
  std::vector<const SamplingParams*> all_params;
  std::vector<at::Generator*> all_generators;
  for (std::size_t r = 0; r < params.size(); ++r) {
    all_params.push_back(&params[r]);
    all_generators.push_back(&batch_generators[r]);
  }
  const auto batch = model_loader::sample_tokens(logits, all_params, all_generators);
  auto alone_generators = generators();
  for (std::size_t r = 0; r < params.size(); ++r) {
    const auto alone = model_loader::sample_tokens(
        logits.narrow(0, static_cast<std::int64_t>(r), 1), {&params[r]}, {&alone_generators[r]})[0];
    BOOST_TEST(batch[r].error.has_value() == (r == 4), "row " << r);
    BOOST_TEST(alone.error.has_value() == (r == 4), "row " << r);
    if (r == 4) continue;
    BOOST_TEST(batch[r].token.token == alone.token.token, "row " << r);
    BOOST_TEST(batch[r].token.logprob == alone.token.logprob, "row " << r);
    BOOST_TEST(batch[r].token.top.size() == static_cast<std::size_t>(params[r].logprobs));
    for (std::size_t j = 0; j < batch[r].token.top.size(); ++j)
      BOOST_TEST(batch[r].token.top[j].token == alone.token.top[j].token, "row " << r);
  }
  BOOST_TEST(batch[0].token.token == at::argmax(logits[0]).item<std::int64_t>());
  // top_k 5: the token is one of the five likeliest.
  const auto five = std::get<1>(at::topk(logits[1], 5));
  BOOST_TEST((five == batch[1].token.token).any().item<bool>());
}

// The batched draw follows each row's distribution after its filters: 2,000 rows of the same
// logits (probabilities 0.45, 0.27, 0.18, 0.10; top_k 3 drops the last, leaving 0.5, 0.3, 0.2),
// each with a seed of its own, drawn in one call. A filtered token is never drawn, and the
// frequencies sit within 4 standard deviations of the probabilities (the seeds are fixed, so
// the counts are too).
BOOST_AUTO_TEST_CASE(one_draw_per_row_follows_the_filtered_distribution) {
  constexpr std::int64_t kRows = 2000;
  const at::Tensor logits = at::tensor(std::vector<float>{0.45f, 0.27f, 0.18f, 0.10f})
                                .log()
                                .unsqueeze(0)
                                .expand({kRows, 4});
  SamplingParams params = sampled(0);
  params.top_k = 3;
  params.apply_vllm_rules();
  std::vector<at::Generator> generators;
  std::vector<const SamplingParams*> all_params;
  std::vector<at::Generator*> all_generators;
  for (std::int64_t r = 0; r < kRows; ++r)
    generators.push_back(model_loader::make_cpu_generator(static_cast<std::uint64_t>(r)));
  for (std::int64_t r = 0; r < kRows; ++r) {
    all_params.push_back(&params);
    all_generators.push_back(&generators[static_cast<std::size_t>(r)]);
  }
  std::array<int, 4> counts{};
  for (const auto& row : model_loader::sample_tokens(logits, all_params, all_generators)) {
    BOOST_REQUIRE(!row.error);
    BOOST_REQUIRE(row.token.token >= 0 && row.token.token < 4);
    ++counts[static_cast<std::size_t>(row.token.token)];
  }
  BOOST_TEST(counts[3] == 0);
  const std::array<double, 3> expected = {0.5, 0.3, 0.2};
  for (std::size_t t = 0; t < expected.size(); ++t) {
    const double p = expected[t], sigma = std::sqrt(p * (1 - p) / kRows);
    BOOST_TEST(std::abs(counts[t] / double(kRows) - p) < 4 * sigma,
               "token " << t << " drawn " << counts[t] << " times of " << kRows);
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(kv_cache_budget)

// Options whose KV cache holds `blocks` blocks of 4 positions of the fixture's model.
model_loader::ModelOptions kv_blocks(const model_loader::ServableModel& model,
                                     std::int64_t blocks) {
  model_loader::ModelOptions options;
  auto shape = model.kv_pool()->shape();
  shape.block_size = 4;
  options.kv_block_size = 4;
  options.kv_cache_memory_bytes = static_cast<std::uint64_t>(blocks) * shape.block_bytes();
  return options;
}

// Three sequences of up to 17 positions (5 blocks each) in a cache of 6 blocks: the latest are
// preempted, give their blocks back, recompute later, and produce exactly the tokens they
// produce alone in an unbounded cache.
BOOST_FIXTURE_TEST_CASE(a_full_cache_preempts_the_latest_sequences_and_loses_no_token, Fixture) {
  auto limited = ckpt.load(kv_blocks(*model, 6));
  BOOST_TEST(limited->kv_pool()->max_blocks() == 6);
  const std::vector<std::vector<std::int64_t>> prompts = {
      kPrompt, {8, 1, 2, 60, 13, 13, 4}, {7, 7, 30, 2, 11, 19}};
  std::vector<model_loader::Sequence> sequences;
  for (const auto& p : prompts)
    sequences.emplace_back(p, sampled(33, 12));
  std::vector<model_loader::Sequence*> batch;
  for (auto& s : sequences)
    batch.push_back(&s);
  std::int64_t steps = 0;
  while (std::any_of(batch.begin(), batch.end(), [](auto* s) { return !s->finished(); })) {
    model_loader::step(*limited, batch);
    BOOST_TEST_REQUIRE(++steps < 200);
  }
  std::int64_t preemptions = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    BOOST_TEST(!sequences[i].error().has_value());
    BOOST_TEST(sequences[i].output_tokens() ==
                   model_loader::generate(*model, {prompts[i]}, sampled(33, 12))[0].token_ids,
               "sequence " << i);
    preemptions += sequences[i].preemptions();
  }
  BOOST_TEST(sequences[0].preemptions() == 0);  // the first admitted is never the one to go
  BOOST_TEST(preemptions > 0);
  BOOST_TEST(limited->kv_pool()->free_blocks() == 6);  // finished sequences gave theirs back
}

// A sequence that would not fit even alone ends with an error naming the budget and the flags.
BOOST_FIXTURE_TEST_CASE(a_sequence_the_whole_cache_cannot_hold_fails_naming_the_budget, Fixture) {
  auto limited = ckpt.load(kv_blocks(*model, 2));
  try {
    model_loader::generate(*limited, {kPrompt}, sampled(5, 12));
    BOOST_FAIL("a sequence past the KV cache budget was served");
  } catch (const protocol::RuntimeError& e) {
    const std::string message = e.what();
    BOOST_TEST(message.find("the KV cache cannot hold this sequence: its 9 positions need 3 "
                            "blocks of 4, and the budget allows 2") != std::string::npos,
               message);
    BOOST_TEST(message.find("--kv-cache-memory-bytes") != std::string::npos, message);
  }
  BOOST_TEST(limited->kv_pool()->free_blocks() == 2);
}

// A sequence the whole budget cannot hold, behind one that fits, ends at once: nothing is
// preempted for it, and the one ahead runs to the end untouched.
BOOST_FIXTURE_TEST_CASE(a_sequence_that_can_never_fit_preempts_nothing, Fixture) {
  auto limited = ckpt.load(kv_blocks(*model, 4));
  model_loader::Sequence fits(kPrompt, sampled(8, 6));  // 10 positions: 3 blocks
  model_loader::Sequence never(std::vector<std::int64_t>(17, 3), sampled(9, 4));  // 17: 5 blocks
  std::vector<model_loader::Sequence*> batch{&fits, &never};
  model_loader::step(*limited, batch);
  BOOST_TEST(never.finish_reason().value_or("") == "error");
  BOOST_TEST(never.error()->find("the budget allows 4") != std::string::npos, *never.error());
  while (!fits.finished())
    model_loader::step(*limited, batch);
  BOOST_TEST(fits.preemptions() == 0);
  BOOST_TEST(fits.output_tokens() ==
             model_loader::generate(*model, {kPrompt}, sampled(8, 6))[0].token_ids);
}

BOOST_AUTO_TEST_SUITE_END()
