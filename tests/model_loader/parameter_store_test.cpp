#include "model_loader/parameter_store.hpp"

#include <boost/test/unit_test.hpp>

#include <ATen/TensorOperators.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/model_test_support.hpp"

using namespace hotswap;

BOOST_AUTO_TEST_SUITE(parameter_store)

// The load's parameters are views into one allocation that starts on a 2 MiB boundary (so that
// all of it can be transparent huge pages), each on a cache line; a spare of 2 MiB or more
// starts on a 2 MiB boundary of its own. All are plain contiguous tensors of their shape.
BOOST_AUTO_TEST_CASE(parameters_lie_on_huge_pages) {
  constexpr std::uintptr_t kHugePage = 2u << 20;
  auto config = testing::tiny_config(model_loader::architectures::kLlama);
  config.hidden_size = 256;
  config.vocab_size = 3000;  // a 3 MB float32 embedding and LM head
  model_loader::WeightMapping mapping = model_loader::llama_weight_mapping(config);
  model_loader::ParameterStore store(mapping, at::kFloat, c10::Device(c10::kCPU), false);
  const auto* load = store[0].value.storage().unsafeGetStorageImpl();
  // The first parameter is at the start of the allocation.
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(store[0].value.data_ptr()) % kHugePage == 0);
  int large = 0;
  for (std::size_t i = 0; i < mapping.runtime_params().size(); ++i) {
    const auto& shape = mapping.runtime_params()[i].shape;
    const at::Tensor live = store[i].value, spare = store.take_spare(i);
    BOOST_TEST_CONTEXT(mapping.runtime_params()[i].name) {
      BOOST_TEST(live.storage().unsafeGetStorageImpl() == load);
      BOOST_TEST(
          reinterpret_cast<std::uintptr_t>(live.data_ptr()) % model_loader::kParamAlignment == 0u);
      for (const at::Tensor& t : {live, spare}) {
        BOOST_TEST(t.sizes().vec() == shape);
        BOOST_TEST(t.is_contiguous());
        BOOST_TEST(t.scalar_type() == at::kFloat);
        t.fill_(1.5);  // every byte of it is the tensor's to write
        BOOST_TEST(t.sum().item<double>() == 1.5 * static_cast<double>(t.numel()));
      }
      if (spare.nbytes() < kHugePage) continue;
      ++large;
      BOOST_TEST(reinterpret_cast<std::uintptr_t>(spare.data_ptr()) % kHugePage == 0);
    }
  }
  BOOST_TEST(large >= 2);
  // Every parameter kept its own bytes: no two overlap.
  for (std::size_t i = 0; i < mapping.runtime_params().size(); ++i)
    store[i].value.fill_(static_cast<double>(i));
  for (std::size_t i = 0; i < mapping.runtime_params().size(); ++i)
    BOOST_TEST((store[i].value == static_cast<double>(i)).all().item<bool>());
}

// A packed round's slab: new memory only while every free one is still live. Once a commit has
// replaced the loaded parameters, the load's own allocation is the next round's slab, and then
// the two alternate.
BOOST_AUTO_TEST_CASE(the_loads_allocation_is_the_second_rounds_slab) {
  auto config = testing::tiny_config(model_loader::architectures::kLlama);
  model_loader::WeightMapping mapping = model_loader::llama_weight_mapping(config);
  model_loader::ParameterStore store(mapping, at::kFloat, c10::Device(c10::kCPU), false);
  const std::size_t n = mapping.runtime_params().size();
  std::vector<std::size_t> all(n);
  std::int64_t bytes = 0;
  for (std::size_t i = 0; i < n; ++i) {
    all[i] = i;
    bytes += store[i].value.nbytes();
  }
  auto storage_of = [](const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); };
  // What a staged commit does with a slab: its views become the live tensors, the replaced
  // ones the spares.
  auto commit = [&](const at::Tensor& slab) {
    std::int64_t start = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto size = static_cast<std::int64_t>(store[i].value.nbytes());
      at::Tensor view = slab.narrow(0, start, size).view(at::kFloat).view(store[i].value.sizes());
      store.set_spare(i, std::exchange(store[i].value, view));
      start += size;
    }
    store.keep_slab(slab);
  };
  const auto* load = storage_of(store[0].value);
  at::Tensor first = store.take_spare_slab(bytes, all);
  BOOST_TEST(storage_of(first) != load);  // the loaded parameters are live
  commit(first);
  at::Tensor second = store.take_spare_slab(bytes, all);
  BOOST_TEST(storage_of(second) == load);
  commit(second);
  BOOST_TEST(storage_of(store.take_spare_slab(bytes, all)) == storage_of(first));
}

BOOST_AUTO_TEST_SUITE_END()
