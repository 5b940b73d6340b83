// LoRA adapters held against transformers + peft themselves (golden vectors made by
// tests/golden/make_lora_golden.py): every architecture's logits and greedy tokens with a PEFT
// adapter applied, a batch mixing adapters and the base model, int8 base weights, tensor
// parallelism, and the adapters the model refuses, each by name.
#include <boost/test/unit_test.hpp>

#include <ATen/ops/abs.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/generation.hpp"
#include "model_loader/lora/lora_adapter.hpp"
#include "model_loader/lora/lora_staging.hpp"
#include "model_loader/safetensors_file.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "model_test_support.hpp"
#include "protocol/errors.hpp"
#include "transport/tensor_digest.hpp"

using namespace hotswap;
using namespace std::chrono_literals;
using model_loader::LoraAdapter;
using nlohmann::json;
using testing::max_abs_diff;

namespace {

const std::filesystem::path kGolden = std::filesystem::path(HOTSWAP_GOLDEN_DIR);

json golden_of(const std::string& fixture) {
  return json::parse(std::ifstream(kGolden / "lora" / fixture / "golden.json"));
}

at::Tensor golden_logits(const json& rows) {
  std::vector<at::Tensor> out;
  for (const auto& row : rows)
    out.push_back(at::tensor(row.get<std::vector<float>>()));
  return at::stack(out);
}

// Every position's logits of `ids` through `adapter` (null: the base model).
at::Tensor logits_with(const model_loader::ServableModel& model,
                       const std::vector<std::int64_t>& ids, const LoraAdapter* adapter) {
  model_loader::KvCache cache;
  std::vector<model_loader::ForwardSlice> slices{
      {&cache, static_cast<std::int64_t>(ids.size()), adapter}};
  return model.forward(testing::long_tensor(ids), slices, /*all_positions=*/true);
}

// An adapter directory written by the test: a config and tensors of its own.
struct AdapterDir {
  testing::TempDir dir;
  AdapterDir(const json& config, const std::vector<std::pair<std::string, at::Tensor>>& tensors) {
    std::ofstream(dir.path / "adapter_config.json") << config.dump();
    if (!tensors.empty()) {
      model_loader::save_safetensors((dir.path / "adapter_model.safetensors").string(), tensors);
    }
  }
};

// The message `load_lora_adapter` refuses `adapter` with, or "" where it loads.
std::string refusal(const model_loader::ServableModel& model, const std::filesystem::path& adapter,
                    std::int64_t max_rank = 16) {
  try {
    model.load_lora_adapter(adapter, max_rank);
  } catch (const protocol::ValueError& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(lora)

BOOST_AUTO_TEST_CASE(adapters_match_peft_on_every_architecture) {
  int fixtures = 0;
  double worst = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kGolden / "lora")) {
    const std::string fixture = entry.path().filename().string();
    const json golden = golden_of(fixture);
    auto model = model_loader::load_model(kGolden / "model_loader" / fixture);
    const auto prompt = golden["prompt"].get<std::vector<std::int64_t>>();
    for (const auto& [name, expected] : golden["adapters"].items()) {
      auto adapter = model->load_lora_adapter(entry.path() / name, 16);
      const at::Tensor logits = logits_with(*model, prompt, adapter.get());
      const double diff = max_abs_diff(logits, golden_logits(expected["logits"]));
      worst = std::max(worst, diff);
      BOOST_TEST(diff < 1e-4, fixture << "/" << name << " max |Δ| " << diff);
      // The adapter mattered: without it the logits are far from PEFT's.
      BOOST_TEST(max_abs_diff(logits_with(*model, prompt, nullptr), logits) > 0.5);

      model_loader::SamplingParams greedy;
      greedy.temperature = 0;
      greedy.max_tokens = static_cast<std::int64_t>(expected["greedy"].size());
      auto result = model_loader::generate(*model, {prompt}, greedy, {adapter}).at(0);
      for (std::size_t i = 0; i < expected["greedy"].size(); ++i) {
        const auto& step = expected["greedy"][i];
        BOOST_TEST(result.token_ids[i] == step["token"].get<std::int64_t>(),
                   fixture << "/" << name << " step " << i);
        BOOST_TEST(std::abs(result.logprobs[i] - step["logprob"].get<double>()) < 1e-3);
      }
    }
    ++fixtures;
  }
  BOOST_TEST(fixtures == 7);
  BOOST_TEST_MESSAGE("LoRA logits against PEFT: max |Δ| " << worst);
}

// Each sequence's output is its own whatever shares its batch: two adapters and the base model
// in one step (prefill and decode) give what each gives alone.
BOOST_AUTO_TEST_CASE(a_batch_mixing_adapters_and_the_base_model_equals_each_run_alone) {
  const auto dir = kGolden / "lora" / "qwen2_f32";
  auto model = model_loader::load_model(kGolden / "model_loader" / "qwen2_f32");
  auto wide = model->load_lora_adapter(dir / "wide", 16);
  auto narrow = model->load_lora_adapter(dir / "narrow", 16);
  const std::vector<std::vector<std::int64_t>> prompts = {
      {3, 17, 42, 5, 99}, {64, 7, 120}, {1, 33, 8, 77, 12, 9}, {5, 6}};
  const std::vector<std::shared_ptr<const LoraAdapter>> adapters = {wide, nullptr, narrow, wide};

  model_loader::KvCache caches[4];
  std::vector<model_loader::ForwardSlice> slices;
  std::vector<std::int64_t> tokens;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    slices.push_back({&caches[i], static_cast<std::int64_t>(prompts[i].size()), adapters[i].get()});
    tokens.insert(tokens.end(), prompts[i].begin(), prompts[i].end());
  }
  const at::Tensor together = model->forward(testing::long_tensor(tokens), slices, true);
  std::int64_t row = 0;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const at::Tensor alone = logits_with(*model, prompts[i], adapters[i].get());
    const auto n = static_cast<std::int64_t>(prompts[i].size());
    BOOST_TEST(max_abs_diff(together.narrow(0, row, n), alone) < 1e-5, "sequence " << i);
    row += n;
  }

  model_loader::SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 6;
  const auto batched = model_loader::generate(*model, prompts, greedy, adapters);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto single = model_loader::generate(*model, {prompts[i]}, greedy, {adapters[i]}).at(0);
    BOOST_TEST(batched[i].token_ids == single.token_ids, boost::test_tools::per_element());
    for (std::size_t t = 0; t < single.logprobs.size(); ++t)
      BOOST_TEST(std::abs(batched[i].logprobs[t] - single.logprobs[t]) < 1e-5);
  }
}

// int8 base weights keep their adapters: the update lands on the quantized layer's output, so
// the adapted model is off PEFT's by no more than the int8 base is off transformers'.
BOOST_AUTO_TEST_CASE(int8_base_weights_take_adapters) {
  const std::string fixture = "llama_f32";
  const json golden = golden_of(fixture);
  const json base_golden =
      json::parse(std::ifstream(kGolden / "model_loader" / fixture / "golden.json"));
  model_loader::ModelOptions options;
  options.quantize_int8 = true;
  auto model = model_loader::load_model(kGolden / "model_loader" / fixture, options);
  const auto prompt = golden["prompt"].get<std::vector<std::int64_t>>();
  const double base_error =
      max_abs_diff(logits_with(*model, prompt, nullptr), golden_logits(base_golden["logits"]));
  auto adapter = model->load_lora_adapter(kGolden / "lora" / fixture / "wide", 16);
  const double adapted_error = max_abs_diff(logits_with(*model, prompt, adapter.get()),
                                            golden_logits(golden["adapters"]["wide"]["logits"]));
  BOOST_TEST_MESSAGE("int8: base off by " << base_error << ", adapted by " << adapted_error);
  BOOST_TEST(adapted_error < 3 * base_error + 1e-3);
  BOOST_TEST(golden["adapters"]["wide"]["moved_by"].get<double>() > 10 * adapted_error);
}

// Tensor parallelism shards A and B as vLLM does (column-parallel qkv and gate_up keep their
// rows of B, row-parallel o and down their columns of A): tp = 2 and tp = 4 give tp = 1's logits.
BOOST_AUTO_TEST_CASE(tensor_parallel_ranks_shard_adapters_as_vllm_does) {
  const std::string fixture = "llama_f32";  // 2 KV heads: tp = 4 replicates them
  const json golden = golden_of(fixture);
  const auto prompt = golden["prompt"].get<std::vector<std::int64_t>>();
  const at::Tensor expected = golden_logits(golden["adapters"]["narrow"]["logits"]);
  for (int size : {2, 4}) {
    std::mutex mutex;
    std::vector<double> diffs;
    testing::on_ranks(size, [&](int, std::shared_ptr<transport::Communicator> group) {
      model_loader::ModelOptions options;
      options.tensor_parallel_group = std::move(group);
      options.collective_timeout = 20s;
      auto model = model_loader::load_model(kGolden / "model_loader" / fixture, options);
      auto adapter = model->load_lora_adapter(kGolden / "lora" / fixture / "narrow", 16);
      const double diff = max_abs_diff(logits_with(*model, prompt, adapter.get()), expected);
      std::lock_guard lock(mutex);
      diffs.push_back(diff);
    });
    BOOST_TEST(diffs.size() == static_cast<std::size_t>(size));
    for (double diff : diffs)
      BOOST_TEST(diff < 1e-4, "tp " << size << " max |Δ| " << diff);
  }
}

BOOST_AUTO_TEST_CASE(adapters_the_model_cannot_take_are_refused_by_name) {
  auto model = model_loader::load_model(kGolden / "model_loader" / "llama_f32");
  const auto wide = kGolden / "lora" / "llama_f32" / "wide";
  BOOST_TEST(contains(refusal(*model, wide, 4), "LoRA rank 8 is greater than max_lora_rank 4."));

  const json config = {{"peft_type", "LORA"},
                       {"r", 2},
                       {"lora_alpha", 4},
                       {"target_modules", {"q_proj"}},
                       {"bias", "none"}};
  const std::string q = "base_model.model.model.layers.0.self_attn.q_proj";
  const auto a = at::randn({2, 64}), b = at::randn({64, 2});
  const std::vector<std::pair<std::string, at::Tensor>> good = {{q + ".lora_A.weight", a},
                                                                {q + ".lora_B.weight", b}};
  {
    AdapterDir ok(config, good);
    BOOST_TEST(refusal(*model, ok.dir.path).empty());
    BOOST_TEST(model->load_lora_adapter(ok.dir.path, 16)->adapted_modules() == 1u);
  }
  auto refused_config = [&](const json& change, const std::string& message) {
    json changed = config;
    changed.update(change);
    AdapterDir bad(changed, good);
    const std::string got = refusal(*model, bad.dir.path);
    BOOST_TEST(contains(got, message), got);
  };
  refused_config({{"modules_to_save", {"lm_head"}}}, "`modules_to_save` is [\"lm_head\"]");
  refused_config({{"use_dora", true}}, "DoRA adapters are not served");
  refused_config({{"bias", "all"}}, "adapter biases are not served");
  refused_config({{"rank_pattern", {{"q_proj", 4}}}}, "`rank_pattern` gives some modules");
  refused_config({{"peft_type", "IA3"}}, "only LoRA adapters (\"LORA\") are served");
  refused_config({{"r", 0}}, "`r`");

  auto refused_tensors = [&](const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                             const std::string& message) {
    AdapterDir bad(config, tensors);
    const std::string got = refusal(*model, bad.dir.path);
    BOOST_TEST(contains(got, message), got);
  };
  refused_tensors({{q + ".lora_A.weight", a}}, "has a lora_A");
  refused_tensors({{q + ".lora_A.weight", at::randn({2, 63})}, {q + ".lora_B.weight", b}},
                  "has shape [2, 63]; the base model's `model.layers.0.self_attn.q_proj` "
                  "[64, 64] at rank 2 needs [2, 64]");
  refused_tensors({{"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight", a}},
                  "the base model has no module `model.layers.7.self_attn.q_proj`");
  refused_tensors({{"base_model.model.lm_head.lora_A.weight", a}}, "`lm_head` is not adapted");
  refused_tensors({{"base_model.model.model.embed_tokens.lora_embedding_A", a}},
                  "LoRA on embeddings is not served");
  {
    AdapterDir no_tensors(config, {});
    BOOST_TEST(contains(refusal(*model, no_tensors.dir.path), "no adapter_model.safetensors"));
  }
  testing::TempDir empty;
  BOOST_TEST(contains(refusal(*model, empty.path), "adapter_config.json"));
}

// An adapter moved through a receive engine's surface (LoadableModel) rather than read from disk,
// under the names a live PEFT model gives its tensors: checked as it arrives, served only once
// the round has brought every tensor of the adapter it replaces.
BOOST_AUTO_TEST_CASE(an_adapter_received_through_the_loadable_model_surface_commits_whole) {
  const std::string fixture = "llama_f32";
  auto model = model_loader::load_model(kGolden / "model_loader" / fixture);
  const auto dir = kGolden / "lora" / fixture / "wide";
  auto from_disk = model->load_lora_adapter(dir, 16);
  const auto mapping = model_loader::llama_weight_mapping(model->config());
  auto file = model_loader::SafetensorsFile::open((dir / "adapter_model.safetensors").string());
  std::vector<model_loader::NamedTensor> first, second;
  for (const auto& info : file->tensors()) {
    std::string live = info.name;
    live.insert(live.rfind(".weight"), ".default");  // `...lora_A.default.weight`
    (first.size() <= second.size() ? first : second).emplace_back(live, file->tensor(info));
  }
  std::shared_ptr<const LoraAdapter> committed;
  model_loader::LoraStaging staging(
      mapping, model->device(), model_loader::LoraConfig::load(dir, 16), from_disk->tensor_names(),
      [&](std::shared_ptr<const LoraAdapter> adapter) { committed = std::move(adapter); });
  staging.start_reload();
  staging.load_weights(first);
  // A tensor the adapter cannot hold is refused with its batch, which stages nothing.
  const auto before = staging.staged();
  BOOST_CHECK_THROW(
      staging.load_weights(
          {second.front(), {"base_model.model.lm_head.lora_A.weight", at::zeros({8, 64})}}),
      protocol::ValueError);
  BOOST_TEST(staging.staged() == before);
  // Half an adapter is not served.
  try {
    staging.finish_reload();
    BOOST_FAIL("a round with half the adapter committed");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(contains(e.what(), "tensors; missing `"), e.what());
  }
  BOOST_TEST(!committed);
  staging.load_weights(second);
  staging.finish_reload();
  BOOST_REQUIRE(committed);
  const auto prompt = golden_of(fixture)["prompt"].get<std::vector<std::int64_t>>();
  BOOST_TEST(max_abs_diff(logits_with(*model, prompt, committed.get()),
                          logits_with(*model, prompt, from_disk.get())) == 0.0);
  // Its checksums are those of the file's tensors, by saved name, whatever names they came under.
  BOOST_TEST(committed->checksums() == from_disk->checksums());
  BOOST_TEST(committed->checksums().size() == file->tensors().size());
  for (const auto& info : file->tensors()) {
    BOOST_TEST(committed->checksums().at(info.name) == transport::sha256_hex(file->tensor(info)));
  }
  // A trainer's bfloat16 tensors are staged as they came: their bytes are what is digested.
  model_loader::LoraStaging bf16_staging(
      mapping, model->device(), model_loader::LoraConfig::load(dir, 16), {},
      [&](std::shared_ptr<const LoraAdapter> adapter) { committed = std::move(adapter); });
  std::vector<model_loader::NamedTensor> halves;
  for (const auto& info : file->tensors())
    halves.emplace_back(info.name, file->tensor(info).to(at::kBFloat16));
  bf16_staging.start_reload();
  bf16_staging.load_weights(halves);
  bf16_staging.finish_reload();
  for (const auto& [name, tensor] : halves)
    BOOST_TEST(committed->checksums().at(name) == transport::sha256_hex(tensor));
  // A round at an adapter's own config brings exactly its tensors: one of a module it does not
  // adapt (narrow adapts q, v and down) is refused as it arrives.
  auto narrow = model->load_lora_adapter(kGolden / "lora" / fixture / "narrow", 16);
  model_loader::LoraStaging at_its_config(mapping, model->device(), narrow->config(),
                                          narrow->tensor_names(),
                                          [](std::shared_ptr<const LoraAdapter>) {});
  at_its_config.start_reload();
  try {
    at_its_config.load_weights(
        {{"base_model.model.model.layers.0.self_attn.k_proj.lora_A.weight", at::zeros({4, 64})}});
    BOOST_FAIL("a tensor the adapter lacks was staged");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(contains(e.what(), "is not a tensor of the adapter this round replaces"), e.what());
  }
  BOOST_TEST(at_its_config.staged() == 0u);
  // The sparse planes' patches address a model's weights: refused by name.
  try {
    at_its_config.check_patches({});
    BOOST_FAIL("a staging took sparse patches");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(contains(e.what(), "sparse patches address the model's weights"), e.what());
  }
  // An aborted round drops what it staged.
  staging.start_reload();
  staging.load_weights(first);
  staging.abort_reload();
  BOOST_TEST(staging.staged() == 0u);
}

BOOST_AUTO_TEST_CASE(expert_lora_is_refused_by_name) {
  auto model = model_loader::load_model(kGolden / "model_loader" / "mixtral_window_f32");
  const json config = {{"r", 2}, {"lora_alpha", 4}};
  const std::string expert = "base_model.model.model.layers.0.block_sparse_moe.experts.0.w1";
  AdapterDir bad(config, {{expert + ".lora_A.weight", at::randn({2, 64})},
                          {expert + ".lora_B.weight", at::randn({96, 2})}});
  const std::string got = refusal(*model, bad.dir.path);
  BOOST_TEST(contains(got, "expert LoRA is not served"), got);
}

BOOST_AUTO_TEST_SUITE_END()
