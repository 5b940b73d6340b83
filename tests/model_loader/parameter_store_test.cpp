#include "model_loader/parameter_store.hpp"

#include <boost/test/unit_test.hpp>

#include <cstdint>

#include "model_loader/architectures/llama_family.hpp"
#include "model_loader/model_test_support.hpp"

using namespace hotswap;

BOOST_AUTO_TEST_SUITE(parameter_store)

// Tensors of 2 MiB or more start on a 2 MiB boundary (so that all of each can be a transparent
// huge page), live tensors and spares alike, and are plain contiguous tensors of their shape;
// smaller ones are libtorch's own allocations.
BOOST_AUTO_TEST_CASE(large_tensors_start_on_huge_page_boundaries) {
  constexpr std::uintptr_t kHugePage = 2u << 20;
  auto config = testing::tiny_config(model_loader::architectures::kLlama);
  config.hidden_size = 256;
  config.vocab_size = 3000;  // a 3 MB float32 embedding and LM head
  model_loader::WeightMapping mapping = model_loader::llama_weight_mapping(config);
  model_loader::ParameterStore store(mapping, at::kFloat, c10::Device(c10::kCPU), false);
  int large = 0;
  for (std::size_t i = 0; i < mapping.runtime_params().size(); ++i) {
    const auto& shape = mapping.runtime_params()[i].shape;
    for (const at::Tensor& t : {store[i].value, store.take_spare(i)}) {
      BOOST_TEST_CONTEXT(mapping.runtime_params()[i].name) {
        BOOST_TEST(t.sizes().vec() == shape);
        BOOST_TEST(t.is_contiguous());
        BOOST_TEST(t.scalar_type() == at::kFloat);
        if (t.nbytes() < kHugePage) continue;
        ++large;
        BOOST_TEST(reinterpret_cast<std::uintptr_t>(t.data_ptr()) % kHugePage == 0);
        t.fill_(1.5);  // every byte of it is the tensor's to write
        BOOST_TEST(t.sum().item<double>() == 1.5 * static_cast<double>(t.numel()));
      }
    }
  }
  BOOST_TEST(large >= 2);
}

BOOST_AUTO_TEST_SUITE_END()
