// The decode step's CUDA-graph bookkeeping, run by the eager stand-in: which batch sizes are
// captured, which graph a step replays, when a commit switches graph sets, and the padded
// metadata a step's kernels read.
#include "model_loader/kernels/decode_graph_cache.hpp"

#include <boost/test/unit_test.hpp>

#include <array>
#include <memory>
#include <vector>

#include "model_loader/kernels/cuda_graph_recorder.hpp"
#include "model_loader/kernels/cuda_graph_sizes.hpp"
#include "model_loader/kernels/decode_step_metadata.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;
using namespace hotswap::model_loader::kernels;

BOOST_AUTO_TEST_SUITE(decode_graphs)

BOOST_AUTO_TEST_CASE(default_sizes_are_vllms_up_to_max_num_seqs) {
  BOOST_TEST(CudaGraphSizes::default_sizes(1) == (std::vector<std::int64_t>{1}));
  BOOST_TEST(CudaGraphSizes::default_sizes(6) == (std::vector<std::int64_t>{1, 2, 4, 6}));
  BOOST_TEST(CudaGraphSizes::default_sizes(24) == (std::vector<std::int64_t>{1, 2, 4, 8, 16, 24}));
  const auto big = CudaGraphSizes::default_sizes(300);
  BOOST_TEST(big.size() == 3u + 32u + 2u + 1u);  // 1 2 4, 8..256, 272 288, 300
  BOOST_TEST(big[34] == 256);
  BOOST_TEST(big[35] == 272);
  BOOST_TEST(big.back() == 300);
}

BOOST_AUTO_TEST_CASE(a_step_takes_the_smallest_size_that_holds_it) {
  const CudaGraphSizes sizes({8, 1, 4, 4, 2, 64}, 16, false);
  BOOST_TEST(sizes.sizes() == (std::vector<std::int64_t>{1, 2, 4, 8}), "sorted, once, <= 16");
  BOOST_TEST(*sizes.bucket_for(1) == 1);
  BOOST_TEST(*sizes.bucket_for(3) == 4);
  BOOST_TEST(*sizes.bucket_for(8) == 8);
  BOOST_TEST(!sizes.bucket_for(9).has_value(), "larger than every size: eager");
  BOOST_TEST(CudaGraphSizes({}, 16, true).empty(), "--enforce-eager captures nothing");
  HOTSWAP_CHECK_THROW_MSG(CudaGraphSizes({4, 0}, 16, false), protocol::ValueError,
                          "--cuda-graph-sizes: 0: a batch size is at least 1");
}

// A step over "device buffers" that outlive its graphs, as a graph's must.
struct FakeStep {
  std::vector<int> inputs = std::vector<int>(8, 0);
  std::vector<int> outputs = std::vector<int>(8, 0);
  int launches = 0;
  void prepare(std::int64_t rows, int value) {
    for (std::int64_t r = 0; r < rows; ++r)
      inputs[static_cast<std::size_t>(r)] = value;
  }
  void step(std::int64_t rows) {
    ++launches;
    for (std::int64_t r = 0; r < rows; ++r) {
      outputs[static_cast<std::size_t>(r)] = inputs[static_cast<std::size_t>(r)] * 10;
    }
  }
};

BOOST_AUTO_TEST_CASE(a_graph_is_captured_once_per_size_and_storage_and_replayed_after) {
  DecodeGraphCache cache(CudaGraphSizes({1, 2, 4}, 8, false),
                         std::make_shared<EagerGraphRecorder>());
  FakeStep fake;
  const StorageKey weights_a{1};
  auto run = [&](StorageKey key, std::int64_t sequences, int value) {
    return cache.run(
        key, sequences, [&](std::int64_t rows) { fake.prepare(rows, value); },
        [&fake](std::int64_t rows) { fake.step(rows); });
  };
  auto first = run(weights_a, 3, 7);
  BOOST_TEST(first.captured);
  BOOST_TEST(*first.bucket == 4);
  BOOST_TEST(fake.outputs[2] == 70);
  BOOST_TEST(fake.outputs[3] == 70, "the padding row ran too");
  auto second = run(weights_a, 4, 9);  // new inputs, same graph
  BOOST_TEST(!second.captured);
  BOOST_TEST(fake.outputs[0] == 90, "a replay reads what prepare wrote");
  BOOST_TEST(cache.captures() == 1u);
  BOOST_TEST(cache.replays() == 1u);
  auto eager = run(weights_a, 6, 1);  // larger than every size
  BOOST_TEST(!eager.bucket.has_value());
  BOOST_TEST(cache.eager_steps() == 1u);
  BOOST_TEST(fake.outputs[5] == 10);
}

BOOST_AUTO_TEST_CASE(a_commit_switches_graph_sets_and_the_third_storage_evicts_the_oldest) {
  DecodeGraphCache cache(CudaGraphSizes({2}, 8, false), std::make_shared<EagerGraphRecorder>());
  FakeStep fake;
  auto run = [&](std::uint64_t key) {
    return cache.run(
        StorageKey{key}, 2, [&](std::int64_t rows) { fake.prepare(rows, 1); },
        [&fake](std::int64_t rows) { fake.step(rows); });
  };
  BOOST_TEST(run(1).captured);   // the load's weights
  BOOST_TEST(run(2).captured);   // a staged commit: the shadows are live
  BOOST_TEST(!run(1).captured);  // the next commit: the first set again, its graphs kept
  BOOST_TEST(!run(2).captured);
  BOOST_TEST(cache.storage_sets() == 2u);
  BOOST_TEST(run(3).captured);  // storage never seen (the cache grew): a set of its own
  BOOST_TEST(cache.storage_sets() == 2u, "at most two sets");
  BOOST_TEST(!run(2).captured, "the most recent one was kept");
  BOOST_TEST(run(1).captured, "the least recent one was dropped");
  BOOST_TEST(cache.graphs() == 2u);
  cache.clear();
  BOOST_TEST(cache.graphs() == 0u);
}

BOOST_AUTO_TEST_CASE(cuda_graphs_are_refused_off_a_cuda_device) {
  // A ValueError in a build whose libtorch has CUDA, a RuntimeError in one without.
  BOOST_CHECK_THROW(CudaGraphRecorder(c10::Device(c10::kCPU)), protocol::Error);
}

BOOST_AUTO_TEST_CASE(a_storage_key_follows_every_address_in_order) {
  int a = 0, b = 0;
  const std::array<const void*, 2> ab{&a, &b};
  const std::array<const void*, 2> ba{&b, &a};
  const std::array<const void*, 2> ab_again{&a, &b};
  BOOST_TEST(storage_key(ab).digest == storage_key(ab_again).digest);
  BOOST_TEST(storage_key(ab).digest != storage_key(ba).digest);
}

BOOST_AUTO_TEST_CASE(metadata_pads_rows_with_the_scratch_block_at_fixed_offsets) {
  DecodeStepMetadata metadata(/*max_rows=*/4, /*max_blocks_per_row=*/3, /*block_size=*/16,
                              /*scratch_block=*/99);
  const std::vector<std::int32_t> first{5, 6}, second{7};
  const std::vector<DecodeRow> rows{{11, 20, first}, {12, 3, second}};
  const auto before = metadata.sections();
  metadata.fill(rows, 4);
  const auto& s = metadata.sections();
  BOOST_TEST(s.total == before.total);
  BOOST_TEST(s.total == 4u * 6 + 2 + 4u * 3);
  auto section = [&](std::size_t start, std::size_t count) {
    auto span = metadata.section(start, count);
    return std::vector<std::int32_t>(span.begin(), span.end());
  };
  BOOST_TEST(section(s.tokens, 4) == (std::vector<std::int32_t>{11, 12, 0, 0}));
  BOOST_TEST(section(s.positions, 4) == (std::vector<std::int32_t>{20, 3, 0, 0}));
  BOOST_TEST(section(s.row_of_token, 4) == (std::vector<std::int32_t>{0, 1, 2, 3}));
  BOOST_TEST(section(s.q_indptr, 5) == (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
  BOOST_TEST(section(s.page_indptr, 5) == (std::vector<std::int32_t>{0, 2, 3, 4, 5}));
  BOOST_TEST(section(s.page_indices, 5) == (std::vector<std::int32_t>{5, 6, 7, 99, 99}));
  BOOST_TEST(section(s.last_page_len, 4) == (std::vector<std::int32_t>{5, 4, 1, 1}));
  HOTSWAP_CHECK_THROW_MSG(metadata.fill(rows, 1), protocol::ValueError,
                          "a decode step of 2 sequences cannot take 1 rows (at most 4)");
  const std::vector<DecodeRow> short_of_blocks{{1, 40, first}};
  HOTSWAP_CHECK_THROW_MSG(metadata.fill(short_of_blocks, 1), protocol::ValueError,
                          "decode row 0: position 40 needs 3 blocks of 16; it holds 2");
}

BOOST_AUTO_TEST_SUITE_END()
