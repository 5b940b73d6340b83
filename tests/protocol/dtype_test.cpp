#include "protocol/dtype.hpp"

#include <boost/test/unit_test.hpp>

#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap::protocol;

BOOST_AUTO_TEST_SUITE(dtype)

BOOST_AUTO_TEST_CASE(every_wire_name_resolves_with_its_item_size) {
  struct Row {
    const char* name;
    std::size_t size;
  };
  const Row rows[] = {{"float32", 4}, {"float16", 2}, {"bfloat16", 2},      {"float64", 8},
                      {"int8", 1},    {"uint8", 1},   {"int16", 2},         {"int32", 4},
                      {"int64", 8},   {"bool", 1},    {"float8_e4m3fn", 1}, {"float8_e5m2", 1}};
  for (const auto& row : rows) {
    DType d = dtype_from_name(row.name);
    BOOST_TEST(dtype_name(d) == row.name);
    BOOST_TEST(item_size(d) == row.size);
  }
}

BOOST_AUTO_TEST_CASE(torch_aliases_resolve_to_their_canonical_names) {
  BOOST_TEST(dtype_name(dtype_from_name("float")) == "float32");
  BOOST_TEST(dtype_name(dtype_from_name("half")) == "float16");
  BOOST_TEST(dtype_name(dtype_from_name("double")) == "float64");
  BOOST_TEST(dtype_name(dtype_from_name("long")) == "int64");
  BOOST_TEST(dtype_name(dtype_from_name("int")) == "int32");
  BOOST_TEST(dtype_name(dtype_from_name("short")) == "int16");
}

BOOST_AUTO_TEST_CASE(unknown_name_is_a_value_error_naming_it) {
  HOTSWAP_CHECK_THROW_MSG(dtype_from_name("bfloat61"), ValueError, "'bfloat61'");
  HOTSWAP_CHECK_THROW_MSG(dtype_from_name("torch.float32"), ValueError, "'torch.float32'");
  HOTSWAP_CHECK_THROW_MSG(dtype_from_name(""), ValueError, "unknown dtype name");
}

BOOST_AUTO_TEST_CASE(floating_point_types_are_flagged) {
  BOOST_TEST(is_floating_point(DType::kBFloat16));
  BOOST_TEST(is_floating_point(DType::kFloat8E5M2));
  BOOST_TEST(!is_floating_point(DType::kInt32));
  BOOST_TEST(!is_floating_point(DType::kBool));
}

BOOST_AUTO_TEST_SUITE_END()
