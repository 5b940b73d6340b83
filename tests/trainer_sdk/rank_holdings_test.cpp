// The ownership contract of many sending trainer ranks: rank 0's checks of every rank's
// holdings, who sends what, and the expert and layer splits of
// hotswap-trainer --shard.
#include "trainer_sdk/rank_holdings.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/errors.hpp"
#include "test_support.hpp"
#include "trainer_sdk/broadcast_trainer_engine.hpp"
#include "trainer_sdk/shard_plan.hpp"

using namespace hotswap;
using protocol::DType;
using protocol::ParamMeta;
using protocol::ValueError;
using trainer_sdk::RankHoldings;

namespace {

// A layer of two experts, with what surrounds it.
std::vector<ParamMeta> moe_metadata() {
  return {{"model.embed_tokens.weight", DType::kBFloat16, {8, 4}},
          {"model.layers.0.mlp.gate.weight", DType::kBFloat16, {2, 4}},
          {"model.layers.0.mlp.experts.0.up_proj.weight", DType::kBFloat16, {6, 4}},
          {"model.layers.0.mlp.experts.1.up_proj.weight", DType::kBFloat16, {6, 4}},
          {"model.norm.weight", DType::kFloat32, {4}}};
}

std::vector<std::string> names(const std::vector<ParamMeta>& meta) {
  std::vector<std::string> out;
  for (const auto& m : meta)
    out.push_back(m.name);
  return out;
}

RankHoldings holding(std::vector<std::string> held) {
  return RankHoldings{moe_metadata(), std::move(held)};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rank_holdings)

BOOST_AUTO_TEST_CASE(each_name_is_sent_by_the_lowest_rank_that_holds_it) {
  const std::vector<std::string> replicated = {
      "model.embed_tokens.weight", "model.layers.0.mlp.gate.weight", "model.norm.weight"};
  auto rank0 = holding(replicated);
  rank0.held->push_back("model.layers.0.mlp.experts.0.up_proj.weight");
  auto rank1 = holding(replicated);
  rank1.held->push_back("model.layers.0.mlp.experts.1.up_proj.weight");
  std::vector<RankHoldings> ranks{rank0, rank1};
  BOOST_TEST(trainer_sdk::assign_senders(ranks) == (std::vector<std::int64_t>{0, 0, 0, 1, 0}),
             boost::test_tools::per_element());
  // A rank that holds everything (held_names() is None) covers what the others leave.
  std::vector<RankHoldings> all_on_one{holding({}), RankHoldings{moe_metadata(), std::nullopt}};
  BOOST_TEST(trainer_sdk::assign_senders(all_on_one) == (std::vector<std::int64_t>(5, 1)),
             boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(the_first_orphan_is_named) {
  std::vector<RankHoldings> ranks{holding({"model.embed_tokens.weight", "model.norm.weight"}),
                                  holding({"model.layers.0.mlp.gate.weight"})};
  HOTSWAP_CHECK_THROW_MSG(
      trainer_sdk::assign_senders(ranks), ValueError,
      "'model.layers.0.mlp.experts.0.up_proj.weight' is held by no trainer rank (held_names() of "
      "ranks 0..1): every name must be held by at least one rank, or it can never be served (2 "
      "names are orphaned)");
}

BOOST_AUTO_TEST_CASE(metadata_must_describe_the_whole_model_on_every_rank) {
  auto share_only = holding({"model.norm.weight"});
  share_only.metadata.resize(2);
  std::vector<RankHoldings> ranks{RankHoldings{moe_metadata(), std::nullopt}, share_only};
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::assign_senders(ranks), ValueError,
                          "metadata() must describe the WHOLE model on every rank");
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::assign_senders(ranks), ValueError,
                          "rank 1 declares 2 parameters and rank 0 declares 5");
  auto other_dtype = holding({});
  other_dtype.metadata[4].dtype = DType::kBFloat16;
  ranks[1] = other_dtype;
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::assign_senders(ranks), ValueError,
                          "rank 1 disagrees with rank 0 at index 4: rank 0 declares "
                          "'model.norm.weight' float32 [4], rank 1 declares 'model.norm.weight' "
                          "bfloat16 [4]");
  ranks[1] = holding({"model.layers.9.self_attn.q_proj.weight"});
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::assign_senders(ranks), ValueError,
                          "rank 1's held_names() include 'model.layers.9.self_attn.q_proj.weight', "
                          "which metadata() does not declare");
}

BOOST_AUTO_TEST_CASE(holdings_travel_as_json) {
  auto rank = holding({"model.norm.weight"});
  auto back = RankHoldings::from_json(rank.to_json());
  BOOST_TEST(back.metadata == rank.metadata);
  BOOST_TEST(back.held.value() == rank.held.value(), boost::test_tools::per_element());
  BOOST_TEST(!RankHoldings::from_json(RankHoldings{moe_metadata(), std::nullopt}.to_json()).held);
  auto bad = rank.to_json();
  bad["held"] = "model.norm.weight";
  HOTSWAP_CHECK_THROW_MSG(RankHoldings::from_json(bad), ValueError, "field `held`");
}

BOOST_AUTO_TEST_CASE(a_rank_visits_its_groups_and_sends_what_it_was_given) {
  auto meta = moe_metadata();
  // Rank 1 holds expert 1 only: it visits the whole layer (its group), sends one tensor.
  auto share = trainer_sdk::RankShare::of(
      1, meta, {0, 0, 0, 1, 0},
      {{"model.layers.0.mlp.gate.weight", "model.layers.0.mlp.experts.0.up_proj.weight",
        "model.layers.0.mlp.experts.1.up_proj.weight"}});
  BOOST_TEST(share.visits == (std::vector<bool>{false, true, true, true, false}),
             boost::test_tools::per_element());
  BOOST_TEST(share.sends == (std::vector<bool>{false, false, false, true, false}),
             boost::test_tools::per_element());
  HOTSWAP_CHECK_THROW_MSG(trainer_sdk::RankShare::of(1, meta, {0, 0, 0, 1, 1}, {}), ValueError,
                          "trainer rank 1 sends 'model.layers.0.mlp.experts.1.up_proj.weight', but "
                          "its groups() leave it out");
}

BOOST_AUTO_TEST_CASE(expert_split_gives_each_rank_a_block_of_experts_and_every_shared_tensor) {
  std::vector<std::string> checkpoint;
  for (int layer = 0; layer < 2; ++layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".";
    checkpoint.push_back(prefix + "mlp.gate.weight");
    for (int e = 0; e < 4; ++e)
      checkpoint.push_back(prefix + "mlp.experts." + std::to_string(e) + ".down_proj.weight");
  }
  checkpoint.push_back("model.embed_tokens.weight");
  auto rank1 = trainer_sdk::held_by_rank(checkpoint, trainer_sdk::ShardBy::kExperts, 1, 2);
  BOOST_TEST(rank1.contains("model.layers.1.mlp.experts.2.down_proj.weight"));
  BOOST_TEST(rank1.contains("model.layers.0.mlp.experts.3.down_proj.weight"));
  BOOST_TEST(!rank1.contains("model.layers.0.mlp.experts.1.down_proj.weight"));
  BOOST_TEST(rank1.contains("model.layers.0.mlp.gate.weight"));
  BOOST_TEST(rank1.contains("model.embed_tokens.weight"));
  BOOST_TEST(rank1.size() == 3u + 4u);  // gates and embeddings, 2 experts in each of 2 layers
  // 2 experts over 3 ranks still splits: a rank may hold none, and keeps the shared tensors.
  auto third =
      trainer_sdk::held_by_rank(names(moe_metadata()), trainer_sdk::ShardBy::kExperts, 2, 3);
  BOOST_TEST(third.size() == 3u);
}

BOOST_AUTO_TEST_CASE(layer_split_is_pipeline_stages) {
  const std::vector<std::string> checkpoint = {"lm_head.weight",
                                               "model.embed_tokens.weight",
                                               "model.layers.0.mlp.up_proj.weight",
                                               "model.layers.1.mlp.up_proj.weight",
                                               "model.layers.2.mlp.up_proj.weight",
                                               "model.norm.weight"};
  auto first = trainer_sdk::held_by_rank(checkpoint, trainer_sdk::ShardBy::kLayers, 0, 2);
  auto last = trainer_sdk::held_by_rank(checkpoint, trainer_sdk::ShardBy::kLayers, 1, 2);
  BOOST_CHECK(first == (std::unordered_set<std::string>{"model.embed_tokens.weight",
                                                        "model.layers.0.mlp.up_proj.weight",
                                                        "model.layers.1.mlp.up_proj.weight"}));
  BOOST_CHECK(last ==
              (std::unordered_set<std::string>{
                  "lm_head.weight", "model.layers.2.mlp.up_proj.weight", "model.norm.weight"}));
  HOTSWAP_CHECK_THROW_MSG(
      trainer_sdk::held_by_rank({"model.norm.weight"}, trainer_sdk::ShardBy::kExperts, 0, 2),
      ValueError, "this is a dense model; shard it by layers");
}

BOOST_AUTO_TEST_SUITE_END()
