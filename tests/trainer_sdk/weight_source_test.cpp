#include "trainer_sdk/weight_source.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/ops/arange.h>
#include <ATen/ops/zeros.h>
#include <torch/nn/modules/linear.h>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/module_source.hpp"
#include "trainer_sdk/tensor_list_source.hpp"

using namespace hotswap;
using protocol::DType;
using protocol::ParamMeta;

namespace {

std::vector<std::pair<std::string, at::Tensor>> tiny_model() {
  auto f32 = at::TensorOptions().dtype(at::kFloat);
  return {{"model.embed_tokens.weight", at::zeros({4, 2}, f32)},
          {"model.layers.0.mlp.up_proj.weight", at::arange(6, f32).reshape({3, 2})},
          {"model.layers.0.input_layernorm.weight", at::zeros({2}, f32.dtype(at::kBFloat16))},
          {"model.layers.1.mlp.up_proj.weight", at::zeros({3, 2}, f32)},
          {"model.norm.weight", at::zeros({2}, f32)},
          {"lm_head.weight", at::zeros({4, 2}, f32)}};
}

std::vector<std::string> names_of(trainer_sdk::WeightStream& stream) {
  std::vector<std::string> out;
  while (auto item = stream.next())
    out.push_back(item->name);
  return out;
}

// A source whose iteration disagrees with its metadata, to drive the order check.
class SwappedSource final : public trainer_sdk::WeightSource {
 public:
  explicit SwappedSource(std::size_t truncate_to = SIZE_MAX) : truncate_to_(truncate_to) {}
  std::vector<ParamMeta> metadata() override { return inner_.metadata(); }
  std::unique_ptr<trainer_sdk::WeightStream> iter() override {
    auto items = tiny_model();
    std::swap(items[1], items[3]);  // layer 1 arrives where layer 0 was declared
    if (truncate_to_ < items.size()) items.resize(truncate_to_);
    return trainer_sdk::TensorListSource(items).iter();
  }

 private:
  trainer_sdk::TensorListSource inner_{tiny_model()};
  std::size_t truncate_to_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(weight_source)

BOOST_AUTO_TEST_CASE(tensor_list_metadata_agrees_with_iteration) {
  trainer_sdk::TensorListSource source(tiny_model());
  auto meta = source.metadata();
  BOOST_REQUIRE_EQUAL(meta.size(), 6u);
  BOOST_TEST(meta[2].dtype == DType::kBFloat16);
  BOOST_TEST(meta[1].shape == (std::vector<std::int64_t>{3, 2}));
  auto stream = source.iter();
  for (const auto& m : meta) {
    auto item = stream->next();
    BOOST_REQUIRE(item.has_value());
    BOOST_TEST(item->name == m.name);
    BOOST_TEST(item->held());
  }
  BOOST_TEST(!stream->next().has_value());
}

BOOST_AUTO_TEST_CASE(every_iteration_is_a_fresh_pass) {
  trainer_sdk::TensorListSource source(tiny_model());
  auto first = source.iter();
  BOOST_TEST(names_of(*first).size() == 6u);
  auto second = source.iter();
  BOOST_TEST(names_of(*second).size() == 6u);
}

BOOST_AUTO_TEST_CASE(groups_follow_layerwise_groups_of_the_metadata) {
  trainer_sdk::TensorListSource source(tiny_model());
  auto groups = source.groups();
  BOOST_REQUIRE_EQUAL(groups.size(), 4u);
  BOOST_TEST(groups[1].size() == 2u);
  BOOST_TEST(groups[3] == (std::vector<std::string>{"model.norm.weight", "lm_head.weight"}));
  auto batches = source.iter_groups();
  std::size_t count = 0;
  while (auto batch = batches->next()) {
    BOOST_TEST(batch->names == groups[count]);
    BOOST_TEST(batch->tensors.size() == batch->names.size());
    ++count;
  }
  BOOST_TEST(count == 4u);
}

BOOST_AUTO_TEST_CASE(held_names_filter_groups_and_unheld_names_yield_no_tensor) {
  auto all = tiny_model();
  std::vector<ParamMeta> meta;
  for (const auto& [name, t] : all)
    meta.push_back(trainer_sdk::param_meta_of(name, t));
  // This rank holds layer 0's MLP only (e.g. one pipeline stage, part of a layer).
  std::map<std::string, at::Tensor> held = {{all[1].first, all[1].second}};
  trainer_sdk::TensorListSource source(meta, held);
  BOOST_TEST(source.metadata().size() == 6u);  // metadata still describes the whole model
  BOOST_TEST(source.held_names()->size() == 1u);
  auto groups = source.groups();
  BOOST_REQUIRE_EQUAL(groups.size(), 1u);
  BOOST_TEST(groups[0] == (std::vector<std::string>{"model.layers.0.mlp.up_proj.weight",
                                                    "model.layers.0.input_layernorm.weight"}));
  auto batches = source.iter_groups();
  auto batch = batches->next();
  BOOST_REQUIRE(batch.has_value());
  BOOST_TEST(batch->tensors[0].defined());
  BOOST_TEST(!batch->tensors[1].defined());
  BOOST_TEST(!batches->next().has_value());
}

BOOST_AUTO_TEST_CASE(out_of_order_iteration_is_rejected_naming_both_names) {
  SwappedSource source;
  auto batches = source.iter_groups();
  BOOST_CHECK_NO_THROW(batches->next());  // the embeddings group is in order
  HOTSWAP_CHECK_THROW_MSG(batches->next(), protocol::RuntimeError,
                          "WeightSource yielded 'model.layers.1.mlp.up_proj.weight' but expected "
                          "'model.layers.0.mlp.up_proj.weight'; iteration order must match "
                          "metadata().");
}

BOOST_AUTO_TEST_CASE(truncated_iteration_is_rejected_naming_the_missing_name) {
  class Truncated final : public trainer_sdk::WeightSource {
   public:
    std::vector<ParamMeta> metadata() override { return full_.metadata(); }
    std::unique_ptr<trainer_sdk::WeightStream> iter() override {
      auto items = tiny_model();
      items.resize(5);
      return trainer_sdk::TensorListSource(items).iter();
    }
    trainer_sdk::TensorListSource full_{tiny_model()};
  } source;
  auto batches = source.iter_groups();
  for (int i = 0; i < 3; ++i)
    batches->next();
  HOTSWAP_CHECK_THROW_MSG(batches->next(), protocol::RuntimeError,
                          "WeightSource ended but expected 'lm_head.weight'");
}

BOOST_AUTO_TEST_CASE(tensor_list_rejects_what_it_cannot_describe) {
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::TensorListSource({{"a", at::Tensor()}}),
                          protocol::ValueError, "'a' has no tensor");
  auto t = at::zeros({1});
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::TensorListSource({{"a", t}, {"a", t}}), protocol::ValueError,
                          "'a' appears twice");
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::TensorListSource({{"c", at::zeros({1}, at::kComplexFloat)}}),
                          protocol::ValueError, "'c': torch dtype ComplexFloat has no name");
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::TensorListSource(std::vector<ParamMeta>{}, {{"stray", t}}),
                          protocol::ValueError, "held tensor 'stray' is not in the metadata");
}

BOOST_AUTO_TEST_CASE(module_source_reads_named_parameters) {
  auto module = std::make_shared<torch::nn::Module>();
  module->register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(3, 2)));
  module->register_module("head", torch::nn::Linear(torch::nn::LinearOptions(2, 5).bias(false)));
  trainer_sdk::ModuleSource source(module);
  auto meta = source.metadata();
  BOOST_REQUIRE_EQUAL(meta.size(), 3u);
  BOOST_TEST(meta[0].name == "proj.weight");
  BOOST_TEST(meta[0].shape == (std::vector<std::int64_t>{2, 3}));
  BOOST_TEST(meta[1].name == "proj.bias");
  BOOST_TEST(meta[2].name == "head.weight");
  // Iteration yields the live storage, without autograd, and agrees with the metadata.
  for (int pass = 0; pass < 2; ++pass) {
    auto stream = source.iter();
    for (const auto& m : meta) {
      auto item = stream->next();
      BOOST_REQUIRE(item.has_value());
      BOOST_TEST(item->name == m.name);
      BOOST_TEST(!item->tensor.requires_grad());
    }
    BOOST_TEST(!stream->next().has_value());
  }
  auto first = source.iter()->next();
  BOOST_TEST(first->tensor.data_ptr() == module->named_parameters()["proj.weight"].data_ptr());
}

BOOST_AUTO_TEST_SUITE_END()
