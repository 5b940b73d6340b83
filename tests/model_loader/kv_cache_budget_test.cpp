// The KV cache's share of a GPU, as vLLM budgets it, on figures (the device's memory is read
// where the worker starts; here the arithmetic and the refusal are checked without one).
#include "model_loader/kv_cache_budget.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;
using namespace hotswap::model_loader;

namespace {

constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;

GpuMemoryShares h100_with_an_8b_model() {
  GpuMemoryShares m;
  m.total = 80 * kGiB;
  m.free = 64 * kGiB;  // the weights and the CUDA context are allocated
  m.weights = 15 * kGiB;
  m.staged_shadow = 15 * kGiB;
  m.activations = 2 * kGiB;
  m.cuda_graphs = 0;
  return m;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(gpu_memory_budget)

BOOST_AUTO_TEST_CASE(the_cache_takes_what_the_fraction_leaves_after_every_share) {
  const auto budget = gpu_kv_cache_budget(h100_with_an_8b_model(), 0.9, kGiB, 8192);
  // 0.9 * 80 = 72 GiB for this worker; less 15 weights, 15 shadow, 2 activations: 40 GiB.
  BOOST_TEST(budget.bytes == 40 * kGiB);
  BOOST_TEST(budget.shares ==
             "KV cache 40.0 GiB of --gpu-memory-utilization 0.90 x 80.0 GiB (weights 15.0 GiB, "
             "staged shadow 15.0 GiB, activations 2.0 GiB, CUDA graphs 0.0 GiB, 64.0 GiB free "
             "after the weights)");
  BOOST_TEST(budget.shares.find("; ") == std::string::npos, "the ready line splits on '; '");
}

BOOST_AUTO_TEST_CASE(memory_other_processes_hold_is_never_counted_as_the_caches) {
  auto shared = h100_with_an_8b_model();
  shared.free = 30 * kGiB;  // another process holds 34 GiB
  const auto budget = gpu_kv_cache_budget(shared, 0.9, kGiB, 8192);
  BOOST_TEST(budget.bytes == 13 * kGiB);  // 30 free less 15 shadow and 2 activations
}

BOOST_AUTO_TEST_CASE(a_budget_without_room_for_one_sequence_is_refused_with_its_shares) {
  auto tight = h100_with_an_8b_model();
  tight.weights = 60 * kGiB;  // 72 - 60 - 15 - 2 < 0
  HOTSWAP_CHECK_THROW_MSG(gpu_kv_cache_budget(tight, 0.9, kGiB, 32768), protocol::ValueError,
                          "KV cache 0.0 GiB of --gpu-memory-utilization 0.90 x 80.0 GiB (weights "
                          "60.0 GiB, staged shadow 15.0 GiB, activations 2.0 GiB, CUDA graphs "
                          "0.0 GiB, 64.0 GiB free after the weights): one sequence of the model's "
                          "32768 positions needs 1.0 GiB of KV cache; raise "
                          "--gpu-memory-utilization");
  HOTSWAP_CHECK_THROW_MSG(gpu_kv_cache_budget(tight, 1.5, kGiB, 32768), protocol::ValueError,
                          "--gpu-memory-utilization 1.500000: must be above 0 and at most 1");
}

BOOST_AUTO_TEST_CASE(activations_follow_the_step_shape) {
  ModelConfig c;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.vocab_size = 128256;
  // 2048 tokens * (2*4096 + 4096+2*1024+4096 + 3*14336) * 2 bytes + 64 rows * vocab * 8 bytes
  const std::uint64_t expected = 2048ull * (8192 + 10240 + 43008) * 2 + 64ull * 128256 * 8;
  BOOST_TEST(estimate_step_activation_bytes(c, 2048, 64, 2) == expected);
  BOOST_TEST(estimate_step_activation_bytes(c, 0, 0, 2) == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
