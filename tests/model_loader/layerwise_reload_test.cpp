#include "model_loader/layerwise_reload.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/abs.h>
#include <ATen/ops/equal.h>

#include <algorithm>
#include <filesystem>
#include <limits>

#include "model_test_support.hpp"
#include "protocol/errors.hpp"
#include "transport/tensor_digest.hpp"
#include "transport/torch_dtype.hpp"

using namespace hotswap;
namespace architectures = model_loader::architectures;
using model_loader::NamedTensor;
using model_loader::UpdateMode;
using testing::CheckpointDir;

namespace {

const std::vector<std::int64_t> kPrompt = {3, 17, 42, 5, 9, 61, 7, 20};

// An "old" model and a "new" checkpoint of the same shape.
struct Fixture {
  model_loader::ModelConfig config = testing::tiny_config(architectures::kQwen2);
  CheckpointDir old_ckpt{config, 100};
  CheckpointDir new_ckpt{config, 200};
  std::vector<NamedTensor> update = new_ckpt.tensors();

  std::shared_ptr<model_loader::ServableModel> model(UpdateMode mode, bool int8 = false) const {
    model_loader::ModelOptions options;
    options.update_mode = mode;
    options.quantize_int8 = int8;
    return old_ckpt.load(options);
  }
  std::vector<NamedTensor> only(const std::function<bool(const std::string&)>& keep) const {
    std::vector<NamedTensor> out;
    for (const auto& [name, t] : update) {
      if (keep(name)) out.emplace_back(name, t);
    }
    return out;
  }
  std::string old_digest(const std::string& name) const {
    return transport::sha256_hex(old_ckpt.open().tensor(name));
  }
  std::string new_digest(const std::string& name) const {
    return transport::sha256_hex(new_ckpt.open().tensor(name));
  }
};

bool in_layer(const std::string& name, int layer) {
  return name.starts_with("model.layers." + std::to_string(layer) + ".");
}

// `tensors` as a trainer iterating its modules sends them: each layer's q, k, v weights
// together and in that order, then their biases, then the rest. File order (by name) puts k
// before q and o between them.
std::vector<NamedTensor> fused_parts_together(std::vector<NamedTensor> tensors) {
  static const std::vector<std::string> kOrder = {
      "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
      "self_attn.q_proj.bias",   "self_attn.k_proj.bias",   "self_attn.v_proj.bias",
      "mlp.gate_proj.weight",    "mlp.up_proj.weight"};
  auto rank = [](const std::string& name) {
    for (std::size_t i = 0; i < kOrder.size(); ++i) {
      if (name.ends_with(kOrder[i])) return i;
    }
    return kOrder.size();
  };
  auto layer = [](const std::string& name) { return name.substr(0, name.find('.', 13)); };
  std::stable_sort(tensors.begin(), tensors.end(), [&](const auto& a, const auto& b) {
    const auto la = layer(a.first), lb = layer(b.first);
    return la != lb ? la < lb : rank(a.first) < rank(b.first);
  });
  return tensors;
}

std::vector<protocol::ParamMeta> metas_of(const std::vector<NamedTensor>& tensors) {
  std::vector<protocol::ParamMeta> metas;
  for (const auto& [name, t] : tensors)
    metas.push_back({name, transport::from_scalar_type(t.scalar_type()), t.sizes().vec()});
  return metas;
}

// Writes `tensors` end to end into `slab`, as packed chunks land, and marks each received but
// the first `unmarked`.
void receive_into(model_loader::ServableModel& m, const at::Tensor& slab,
                  const std::vector<NamedTensor>& tensors, std::size_t unmarked = 0) {
  std::int64_t start = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const at::Tensor bytes = tensors[i].second.contiguous().view({-1}).view(at::kByte);
    slab.narrow(0, start, bytes.numel()).copy_(bytes);
    start += bytes.numel();
    if (i >= unmarked) m.mark_received(tensors[i].first);
  }
  BOOST_TEST(start == slab.numel());
}

constexpr auto kAnyScratch = std::numeric_limits<std::uint64_t>::max();

}  // namespace

BOOST_AUTO_TEST_SUITE(layerwise_reload)

BOOST_FIXTURE_TEST_CASE(staged_tensors_can_be_received_in_place, Fixture) {
  auto m = model(UpdateMode::kStaged);
  const auto dtype = m->dtype();
  m->start_reload();
  for (std::size_t i = 0; i < update.size(); ++i) {
    const auto& [name, t] = update[i];
    auto destination = m->destination_for(name, dtype, t.sizes());
    BOOST_REQUIRE_MESSAGE(destination.has_value(), name);
    if (i == 0) {
      destination->fill_(7);  // filled but never marked: discarded, the old rows serve
      continue;
    }
    destination->copy_(t);
    m->mark_received(name);
  }
  // What the model could not take as it is goes through load_weights.
  const auto& [first, tensor] = update[0];
  BOOST_TEST(!m->destination_for(first, at::kDouble, tensor.sizes()).has_value());
  BOOST_TEST(!m->destination_for(first, dtype, {1, 2, 3}).has_value());
  BOOST_TEST(!m->destination_for("model.no_such.weight", dtype, tensor.sizes()).has_value());
  m->finish_reload();
  for (const auto& [name, digest] : m->checkpoint_checksums()) {
    BOOST_TEST(digest == (name == first ? old_digest(name) : new_digest(name)), name);
  }

  auto inplace = model(UpdateMode::kInplace);
  inplace->start_reload();
  BOOST_TEST(!inplace->destination_for(first, dtype, tensor.sizes()).has_value());
  inplace->abort_reload();
}

BOOST_FIXTURE_TEST_CASE(packed_tensors_land_in_one_slab_in_either_order, Fixture) {
  for (bool together : {true, false}) {
    auto m = model(UpdateMode::kStaged);
    const auto order = together ? fused_parts_together(update) : update;
    m->start_reload();
    // Apart, the parts of a fused parameter land as scratch and are copied out: none allowed,
    // no slab.
    auto slab = m->contiguous_destination(metas_of(order), 0);
    BOOST_TEST(slab.has_value() == together);
    if (!together) slab = m->contiguous_destination(metas_of(order), kAnyScratch);
    BOOST_REQUIRE(slab.has_value());
    receive_into(*m, *slab, order, /*unmarked=*/1);  // filled but not marked: the old serves
    m->finish_reload();
    for (const auto& [name, digest] : m->checkpoint_checksums()) {
      BOOST_TEST(digest == (name == order[0].first ? old_digest(name) : new_digest(name)), name);
    }
  }
}

BOOST_FIXTURE_TEST_CASE(packed_rounds_alternate_between_two_slabs, Fixture) {
  auto m = model(UpdateMode::kStaged);
  const auto news = fused_parts_together(update);
  const auto olds = fused_parts_together(old_ckpt.tensors());
  std::vector<const void*> slabs;
  for (int round = 0; round < 4; ++round) {
    const auto& tensors = round % 2 == 0 ? news : olds;
    m->start_reload();
    auto slab = m->contiguous_destination(metas_of(tensors), 0);
    BOOST_REQUIRE(slab.has_value());
    slabs.push_back(slab->data_ptr());
    receive_into(*m, *slab, tensors);
    m->finish_reload();
    for (const auto& [name, digest] : m->checkpoint_checksums()) {
      BOOST_TEST(digest == (round % 2 == 0 ? new_digest(name) : old_digest(name)), name);
    }
  }
  // The slab a commit replaced is the next round's: no fresh memory after the second round.
  BOOST_TEST(slabs[0] != slabs[1]);
  BOOST_TEST(slabs[2] == slabs[0]);
  BOOST_TEST(slabs[3] == slabs[1]);
  // An aborted round's slab is kept too, and its bytes never serve.
  m->start_reload();
  auto aborted = m->contiguous_destination(metas_of(news), 0);
  BOOST_REQUIRE(aborted.has_value());
  receive_into(*m, *aborted, news);
  m->abort_reload();
  for (const auto& [name, digest] : m->checkpoint_checksums())
    BOOST_TEST(digest == old_digest(name), name);
  m->start_reload();
  BOOST_TEST(m->contiguous_destination(metas_of(news), 0)->data_ptr() == aborted->data_ptr());
  m->abort_reload();
}

BOOST_FIXTURE_TEST_CASE(a_slab_only_where_every_tensor_lands_as_it_is, Fixture) {
  const auto metas = metas_of(fused_parts_together(update));
  auto inplace = model(UpdateMode::kInplace);
  inplace->start_reload();
  BOOST_TEST(!inplace->contiguous_destination(metas, kAnyScratch).has_value());
  inplace->abort_reload();

  auto m = model(UpdateMode::kStaged);
  BOOST_TEST(!m->contiguous_destination(metas, kAnyScratch).has_value());  // no session
  m->start_reload();
  auto twice = metas;
  twice.push_back(metas.front());
  auto unknown = metas;
  unknown.back().name = "model.no_such.weight";
  auto converted = metas;
  converted.front().dtype = protocol::DType::kFloat64;
  auto reshaped = metas;
  reshaped.front().shape = {1, 2, 3};
  for (const auto* refused : {&twice, &unknown, &converted, &reshaped})
    BOOST_TEST(!m->contiguous_destination(*refused, kAnyScratch).has_value());
  // A session that has staged a tensor another way keeps its shadows as they are.
  const auto& [first, tensor] = update[0];
  BOOST_REQUIRE(m->destination_for(first, m->dtype(), tensor.sizes()).has_value());
  BOOST_TEST(!m->contiguous_destination(metas, kAnyScratch).has_value());
  m->abort_reload();
}

BOOST_FIXTURE_TEST_CASE(a_full_update_in_any_order_lands_whole, Fixture) {
  for (auto mode : {UpdateMode::kStaged, UpdateMode::kInplace}) {
    auto m = model(mode);
    m->start_reload();
    auto reversed = update;
    std::reverse(reversed.begin(), reversed.end());
    for (std::size_t i = 0; i < reversed.size(); i += 3) {  // several calls, out of order
      std::vector<NamedTensor> call(
          reversed.begin() + static_cast<long>(i),
          reversed.begin() + static_cast<long>(std::min(i + 3, reversed.size())));
      m->load_weights(call);
    }
    m->finish_reload();
    for (const auto& [name, digest] : m->checkpoint_checksums()) {
      BOOST_TEST(digest == new_digest(name), name);
    }
    BOOST_TEST(!m->is_dirty());
    auto reference = testing::reference_logits(new_ckpt.open(), config, kPrompt);
    BOOST_TEST(at::abs(testing::model_logits(*m, kPrompt) - reference).max().item<double>() < 1e-4);
  }
}

BOOST_FIXTURE_TEST_CASE(an_untouched_layer_keeps_its_old_weights, Fixture) {
  auto m = model(UpdateMode::kStaged);
  m->start_reload();
  m->load_weights(only([](const std::string& n) { return in_layer(n, 1); }));
  m->finish_reload();
  for (const auto& [name, digest] : m->checkpoint_checksums()) {
    BOOST_TEST(digest == (in_layer(name, 1) ? new_digest(name) : old_digest(name)), name);
  }
}

BOOST_FIXTURE_TEST_CASE(a_partial_layer_keeps_the_old_values_of_what_it_did_not_receive, Fixture) {
  for (auto mode : {UpdateMode::kStaged, UpdateMode::kInplace}) {
    auto m = model(mode);
    m->start_reload();
    m->load_weights(only([](const std::string& n) {
      return n == "model.layers.0.self_attn.q_proj.weight" ||
             n == "model.layers.0.mlp.up_proj.weight";
    }));
    m->finish_reload();
    auto digests = m->checkpoint_checksums();
    BOOST_TEST(digests["model.layers.0.self_attn.q_proj.weight"] ==
               new_digest("model.layers.0.self_attn.q_proj.weight"));
    BOOST_TEST(digests["model.layers.0.self_attn.k_proj.weight"] ==
               old_digest("model.layers.0.self_attn.k_proj.weight"));
    BOOST_TEST(digests["model.layers.0.mlp.gate_proj.weight"] ==
               old_digest("model.layers.0.mlp.gate_proj.weight"));
    BOOST_TEST(digests["model.layers.0.mlp.up_proj.weight"] ==
               new_digest("model.layers.0.mlp.up_proj.weight"));
  }
}

BOOST_FIXTURE_TEST_CASE(int8_partial_layer_is_an_error_that_staged_mode_undoes_entirely, Fixture) {
  auto m = model(UpdateMode::kStaged, /*int8=*/true);
  auto before = m->runtime_checksums("");
  m->start_reload();
  // Layer 1 complete (quantized as it completes), layer 0 missing k_proj and v_proj.
  m->load_weights(only([](const std::string& n) {
    return in_layer(n, 1) || n == "model.layers.0.self_attn.q_proj.weight";
  }));
  HOTSWAP_CHECK_THROW_MSG(m->finish_reload(), protocol::ValueError,
                          "int8-quantized, so the old values of the rest cannot be kept; missing "
                          "model.layers.0.self_attn.k_proj.weight, "
                          "model.layers.0.self_attn.v_proj.weight");
  BOOST_TEST((m->runtime_checksums("") == before));
  BOOST_TEST(!m->reload_active());
  // The next session starts clean and a complete update lands.
  m->start_reload();
  m->load_weights(update);
  m->finish_reload();
  BOOST_TEST((m->runtime_checksums("") != before));
}

BOOST_FIXTURE_TEST_CASE(staged_generation_sees_old_weights_until_the_commit, Fixture) {
  auto m = model(UpdateMode::kStaged);
  at::Tensor old_logits = testing::model_logits(*m, kPrompt);
  m->start_reload();
  m->load_weights(update);
  BOOST_TEST(at::equal(testing::model_logits(*m, kPrompt), old_logits));  // mid-session
  m->finish_reload();
  BOOST_TEST(!at::equal(testing::model_logits(*m, kPrompt), old_logits));
}

BOOST_FIXTURE_TEST_CASE(abort_discards_a_staged_session, Fixture) {
  auto m = model(UpdateMode::kStaged);
  auto before = m->runtime_checksums("");
  m->start_reload();
  m->load_weights(update);
  m->abort_reload();
  BOOST_TEST((m->runtime_checksums("") == before));
  BOOST_TEST(!m->is_dirty());
}

BOOST_FIXTURE_TEST_CASE(inplace_failure_marks_dirty_until_a_full_update_lands, Fixture) {
  auto m = model(UpdateMode::kInplace, /*int8=*/true);
  m->start_reload();
  m->load_weights(only([](const std::string& n) {
    return n == "model.layers.0.input_layernorm.weight" ||
           n == "model.layers.0.self_attn.q_proj.weight";
  }));
  BOOST_CHECK_THROW(m->finish_reload(), protocol::ValueError);
  BOOST_TEST(m->is_dirty());
  m->start_reload();  // a partial session that succeeds does not make a dirty model clean
  m->load_weights(only([](const std::string& n) { return in_layer(n, 1); }));
  m->finish_reload();
  BOOST_TEST(m->is_dirty());
  m->start_reload();
  m->load_weights(update);
  m->finish_reload();
  BOOST_TEST(!m->is_dirty());
}

BOOST_FIXTURE_TEST_CASE(checksums_change_exactly_for_the_tensors_that_changed, Fixture) {
  auto m = model(UpdateMode::kStaged);
  auto runtime_before = m->runtime_checksums("");
  auto ckpt_before = m->checkpoint_checksums();
  m->start_reload();
  m->load_weights(only([](const std::string& n) {
    return n == "model.layers.1.self_attn.v_proj.bias" || n == "model.norm.weight";
  }));
  m->finish_reload();
  auto runtime_after = m->runtime_checksums("");
  std::vector<std::string> changed;
  for (const auto& [name, digest] : runtime_after) {
    if (runtime_before[name] != digest) changed.push_back(name);
  }
  BOOST_TEST(changed == (std::vector<std::string>{"model.layers.1.self_attn.qkv_proj.bias",
                                                  "model.norm.weight"}));
  std::vector<std::string> changed_ckpt;
  for (const auto& [name, digest] : m->checkpoint_checksums()) {
    if (ckpt_before[name] != digest) changed_ckpt.push_back(name);
  }
  BOOST_TEST(changed_ckpt == (std::vector<std::string>{"model.layers.1.self_attn.v_proj.bias",
                                                       "model.norm.weight"}));
}

BOOST_FIXTURE_TEST_CASE(incoming_dtypes_convert_and_the_checkpoint_view_follows_them, Fixture) {
  model_loader::ModelOptions options;
  options.dtype = protocol::DType::kBFloat16;
  auto m = old_ckpt.load(options);
  // float32 values that bfloat16 holds exactly, sent as float32.
  at::Tensor w = new_ckpt.open().tensor("model.norm.weight").to(at::kBFloat16).to(at::kFloat);
  m->start_reload();
  m->load_weights({{"model.norm.weight", w}});
  m->finish_reload();
  BOOST_TEST(m->checkpoint_checksums().at("model.norm.weight") == transport::sha256_hex(w));
}

BOOST_FIXTURE_TEST_CASE(session_calls_out_of_order_are_runtime_errors, Fixture) {
  auto m = model(UpdateMode::kStaged);
  HOTSWAP_CHECK_THROW_MSG(m->load_weights(update), protocol::RuntimeError,
                          "load_weights called outside a weight reload");
  HOTSWAP_CHECK_THROW_MSG(m->finish_reload(), protocol::RuntimeError,
                          "finish_reload called without an active reload");
  m->start_reload();
  HOTSWAP_CHECK_THROW_MSG(m->start_reload(), protocol::RuntimeError, "already active");
  m->abort_reload();
}

// A checkpoint read from its files straight into the storage (the disk backend, a load) lands
// exactly as tensor-by-tensor loads do, in both modes, and where the storage needs converting
// (bfloat16) or quantizing (int8) the tensors take the converting path instead.
BOOST_FIXTURE_TEST_CASE(a_checkpoint_read_from_its_files_lands_whole, Fixture) {
  for (auto mode : {UpdateMode::kStaged, UpdateMode::kInplace}) {
    auto m = model(mode);
    m->start_reload();
    m->load_weights_from(new_ckpt.open());
    m->finish_reload();
    for (const auto& [name, digest] : m->checkpoint_checksums()) {
      BOOST_TEST(digest == new_digest(name), name);
    }
    BOOST_TEST(!m->is_dirty());
  }
  model_loader::ModelOptions bf16;
  bf16.dtype = protocol::DType::kBFloat16;
  auto converted = old_ckpt.load(bf16);
  converted->start_reload();
  converted->load_weights_from(new_ckpt.open());
  converted->finish_reload();
  auto reference = testing::reference_logits(new_ckpt.open(), config, kPrompt);
  BOOST_TEST(at::abs(testing::model_logits(*converted, kPrompt) - reference).max().item<double>() <
             0.5);
  auto int8 = model(UpdateMode::kStaged, /*int8=*/true);
  int8->start_reload();
  int8->load_weights_from(new_ckpt.open());
  int8->finish_reload();
  BOOST_TEST(at::abs(testing::model_logits(*int8, kPrompt) - reference).max().item<double>() < 1.0);
}

// A tensor that arrived earlier in the session and comes again from a checkpoint that needs
// converting is written again: the later value wins, as with load_weights. (The first version of
// the checkpoint path skipped every converted tensor already marked received.)
BOOST_FIXTURE_TEST_CASE(a_converted_checkpoint_overwrites_what_arrived_before_it, Fixture) {
  model_loader::ModelOptions bf16;
  bf16.dtype = protocol::DType::kBFloat16;
  auto m = old_ckpt.load(bf16);
  auto expected = new_ckpt.load(bf16)->checkpoint_checksums();
  m->start_reload();
  m->load_weights({update.front()});  // the new value, then the old one over it
  m->load_weights({old_ckpt.tensors().front()});
  m->load_weights_from(new_ckpt.open());
  m->finish_reload();
  BOOST_TEST(m->checkpoint_checksums() == expected);
}

// A shard cut short after it was opened (rewritten under the worker) is an error that says so,
// and a staged model keeps every old weight.
BOOST_FIXTURE_TEST_CASE(a_shard_truncated_while_read_fails_and_keeps_the_old_weights, Fixture) {
  auto m = model(UpdateMode::kStaged);
  auto before = m->checkpoint_checksums();
  auto checkpoint = new_ckpt.open();
  const auto& shard = checkpoint.files().front()->path();
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) / 2);
  m->start_reload();
  try {
    m->load_weights_from(checkpoint);
    BOOST_FAIL("a truncated shard was read");
  } catch (const protocol::ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("truncated") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find(shard) != std::string::npos, e.what());
  }
  m->abort_reload();
  BOOST_TEST(m->checkpoint_checksums() == before);
  BOOST_TEST(!m->is_dirty());
}

BOOST_AUTO_TEST_SUITE_END()
