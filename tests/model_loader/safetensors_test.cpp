#include <boost/test/unit_test.hpp>

#include <sys/stat.h>

#include <future>

#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/equal.h>
#include <ATen/ops/tensor.h>

#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "model_loader/checkpoint.hpp"
#include "model_loader/safetensors_file.hpp"
#include "model_loader/safetensors_writer.hpp"
#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;
using model_loader::SafetensorsFile;
using nlohmann::json;

namespace {

const std::string kGolden = std::string(HOTSWAP_GOLDEN_DIR) + "/safetensors/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Writes a file of an 8-byte header length, `header`, then `data_bytes` zero bytes.
std::string write_raw(const testing::TempDir& dir, const std::string& header,
                      std::size_t data_bytes, std::uint64_t declared_length = UINT64_MAX) {
  std::string path = (dir.path / "raw.safetensors").string();
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  std::uint64_t n = declared_length == UINT64_MAX ? header.size() : declared_length;
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
  return path;
}

// The ValueError message for a malformed file, or "" when it opened.
std::string open_error(const std::string& path) {
  try {
    SafetensorsFile::open(path);
  } catch (const protocol::ValueError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(safetensors)

BOOST_AUTO_TEST_CASE(reads_every_dtype_the_reference_package_wrote) {
  auto described = json::parse(std::ifstream(kGolden + "tensors.json"));
  auto file = SafetensorsFile::open(kGolden + "with_float8.safetensors");
  BOOST_TEST(file->tensors().size() == described["tensors"].size());
  for (const auto& [name, d] : described["tensors"].items()) {
    const auto* info = file->find(name);
    BOOST_REQUIRE_MESSAGE(info != nullptr, name);
    BOOST_TEST(protocol::dtype_name(info->dtype) == d["dtype"].get<std::string>());
    BOOST_TEST(info->shape == d["shape"].get<std::vector<std::int64_t>>());
    if (name.starts_with("f8_")) continue;  // values below; float8 needs libtorch >= 2.1
    at::Tensor t = file->tensor(name).to(at::kDouble).reshape({-1});
    auto expected = d["values"].get<std::vector<double>>();
    BOOST_REQUIRE_EQUAL(t.numel(), static_cast<std::int64_t>(expected.size()));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      BOOST_TEST(t[static_cast<std::int64_t>(i)].item<double>() == expected[i]);
    }
  }
  BOOST_TEST(file->metadata().empty());
  auto common = SafetensorsFile::open(kGolden + "common_dtypes.safetensors");
  BOOST_TEST(common->metadata().at("format") == "pt");
}

BOOST_AUTO_TEST_CASE(views_are_zero_copy_into_the_mapping) {
  auto file = SafetensorsFile::open(kGolden + "common_dtypes.safetensors");
  at::Tensor a = file->tensor("f32");
  at::Tensor b = file->tensor("f32");
  BOOST_TEST(a.data_ptr() == b.data_ptr());
  file.reset();  // the views keep the mapping alive
  BOOST_TEST(a.sum().item<double>() == -1.5);
}

BOOST_AUTO_TEST_CASE(writes_the_same_bytes_as_the_reference_package) {
  auto golden = SafetensorsFile::open(kGolden + "common_dtypes.safetensors");
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& info : golden->tensors())
    tensors.emplace_back(info.name, golden->tensor(info));
  testing::TempDir dir;
  std::string path = (dir.path / "ours.safetensors").string();
  model_loader::save_safetensors(path, tensors, {{"format", "pt"}});
  BOOST_TEST(read_bytes(path) == read_bytes(kGolden + "common_dtypes.safetensors"));
  BOOST_TEST(!std::filesystem::exists(path + ".tmp"));
}

BOOST_AUTO_TEST_CASE(round_trips_every_dtype_libtorch_has) {
  testing::TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (auto type : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble, at::kChar, at::kByte,
                    at::kShort, at::kInt, at::kLong, at::kBool}) {
    tensors.emplace_back(
        std::string("t_") + c10::toString(type),
        at::arange(12, at::TensorOptions().dtype(at::kFloat)).reshape({3, 4}).to(type));
  }
  tensors.emplace_back("transposed", at::arange(6).reshape({2, 3}).t());  // not contiguous
  std::string path = (dir.path / "all.safetensors").string();
  model_loader::save_safetensors(path, tensors);
  auto file = SafetensorsFile::open(path);
  for (const auto& [name, t] : tensors)
    BOOST_TEST(at::equal(file->tensor(name), t), name);
}

BOOST_AUTO_TEST_CASE(an_unfinished_writer_leaves_no_file_behind) {
  testing::TempDir dir;
  std::string path = (dir.path / "partial.safetensors").string();
  {
    model_loader::SafetensorsWriter writer(path, {{"w", protocol::DType::kFloat32, {4}}});
    writer.tensor("w").fill_(1.0);
  }
  BOOST_TEST(!std::filesystem::exists(path));
  BOOST_TEST(!std::filesystem::exists(path + ".tmp"));
}

BOOST_AUTO_TEST_CASE(every_malformed_header_is_an_error_naming_file_tensor_and_fault) {
  testing::TempDir dir;
  auto entry = [](const std::string& dtype, const std::string& shape, const std::string& offsets) {
    return R"({"dtype":")" + dtype + R"(","shape":)" + shape + R"(,"data_offsets":)" + offsets +
           "}";
  };
  struct Case {
    std::string header;
    std::size_t data;
    std::string needle;
    std::uint64_t declared = UINT64_MAX;
  };
  const Case cases[] = {
      {"", 0, "header length 100 runs past the end", 100},
      {"{}", 0, "exceeds the 104857600-byte cap", (100ull << 20) + 1},
      {"{not json", 0, "the header is not valid JSON"},
      {"[1,2]", 0, "the header does not start with '{'"},
      {" {}", 0, "the header does not start with '{'"},
      {"{}  x ", 0, "byte 12 after the header's JSON is not a space"},
      {"{}\n", 0, "byte 10 after the header's JSON is not a space"},
      {R"({"w":)" + entry("F32", "[1]", "[0,4]") + R"(,"w":)" + entry("F32", "[1]", "[0,4]") + "}",
       4, "the header repeats the key 'w'"},
      {R"({"w":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4,
       "the header repeats the key 'dtype'"},
      {"{\"a\":" + std::string(200, '[') + std::string(200, ']') + "}", 0,
       "the header nests arrays and objects deeper than 128 levels"},
      {R"({"w":)" + entry("F32", "[18446744073709551615]", "[0,4]") + "}", 4,
       "tensor 'w': `shape` must hold non-negative 64-bit integers"},
      {R"({"w":)" + entry("F33", "[1]", "[0,4]") + "}", 4,
       "tensor 'w': unknown safetensors dtype 'F33'"},
      {R"({"w":)" + entry("F32", "7", "[0,4]") + "}", 4,
       "tensor 'w': `shape` is missing or not a list"},
      {R"({"w":)" + entry("F32", "[-1]", "[0,4]") + "}", 4,
       "tensor 'w': `shape` must hold non-negative"},
      {R"({"w":)" + entry("F32", "[1]", "[0]") + "}", 4, "tensor 'w': `data_offsets` must be two"},
      {R"({"w":)" + entry("F32", "[1]", "[4,0]") + "}", 4, "tensor 'w': data_offsets begin after"},
      {R"({"w":)" + entry("F32", "[1]", "[0,8]") + "}", 4,
       "tensor 'w': data_offsets end at 8, past the 4-byte"},
      {R"({"w":)" + entry("F32", "[2]", "[0,4]") + "}", 4,
       "tensor 'w': shape [2] of F32 needs 8 bytes but data_offsets span 4"},
      {R"({"a":)" + entry("F32", "[2]", "[0,8]") + R"(,"b":)" + entry("F32", "[1]", "[4,8]") + "}",
       8, "overlaps"},
      {R"({"a":)" + entry("F32", "[1]", "[4,8]") + "}", 8,
       "bytes 0..4 before tensor 'a' belong to no tensor"},
      {R"({"a":)" + entry("F32", "[1]", "[0,4]") + "}", 8,
       "the last 4 bytes of the data area belong to no tensor"},
      {R"({"__metadata__":{"k":1}})", 0, "__metadata__['k'] is not a string"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", 4,
       "tensor 'w': unexpected key 'x'"},
  };
  for (const auto& c : cases) {
    std::string path = write_raw(dir, c.header, c.data, c.declared);
    std::string error = open_error(path);
    BOOST_TEST(error.find("malformed safetensors file " + path) == 0u, c.needle);
    BOOST_TEST(error.find(c.needle) != std::string::npos,
               "wanted '" << c.needle << "' in: " << error);
  }
  // Space padding after the JSON is the reference writer's alignment, and fine.
  std::string padded = write_raw(dir, R"({"w":)" + entry("F32", "[1]", "[0,4]") + "}    ", 4);
  BOOST_TEST(open_error(padded).empty(), open_error(padded));
  std::string tiny = (dir.path / "tiny.safetensors").string();
  std::ofstream(tiny) << "abc";
  BOOST_TEST(open_error(tiny).find("too short for the 8-byte header length") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(checkpoint_directory)

BOOST_AUTO_TEST_CASE(sharded_checkpoint_reads_through_its_index) {
  testing::TempDir dir;
  model_loader::save_safetensors((dir.path / "model-00001-of-00002.safetensors").string(),
                                 {{"a", at::arange(4).to(at::kFloat)}});
  model_loader::save_safetensors((dir.path / "model-00002-of-00002.safetensors").string(),
                                 {{"b", at::arange(2).to(at::kFloat)}});
  json index = {
      {"metadata", {{"total_size", 24}}},
      {"weight_map",
       {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  std::ofstream(dir.path / "model.safetensors.index.json") << index.dump();
  auto ckpt = model_loader::Checkpoint::open(dir.path);
  BOOST_TEST(ckpt.names() == (std::vector<std::string>{"a", "b"}));
  BOOST_TEST(ckpt.total_bytes() == 24u);
  BOOST_TEST(ckpt.tensor("b")[1].item<float>() == 1.0f);
  HOTSWAP_CHECK_THROW_MSG(ckpt.tensor("c"), protocol::ValueError, "has no tensor 'c'");

  index["weight_map"]["b"] = "model-00001-of-00002.safetensors";
  std::ofstream(dir.path / "model.safetensors.index.json", std::ios::trunc) << index.dump();
  HOTSWAP_CHECK_THROW_MSG(model_loader::Checkpoint::open(dir.path), protocol::ValueError,
                          "lists tensor 'b' in model-00001-of-00002.safetensors, which does not "
                          "hold it");
}

BOOST_AUTO_TEST_CASE(a_missing_shard_says_which_and_why) {
  testing::TempDir dir;
  model_loader::save_safetensors((dir.path / "a.safetensors").string(), {{"a", at::arange(2)}});
  json index = {{"weight_map", {{"a", "a.safetensors"}, {"b", "b.safetensors"}}}};
  std::ofstream(dir.path / "model.safetensors.index.json") << index.dump();
  HOTSWAP_CHECK_THROW_MSG(
      model_loader::Checkpoint::open(dir.path), protocol::ValueError,
      "cannot open shard " + (dir.path / "b.safetensors").string() + ": No such file or directory");
}

BOOST_AUTO_TEST_CASE(a_shard_that_is_not_a_regular_file_is_refused_at_once) {
  // A FIFO would block the open forever; a directory named like a shard is no shard either.
  for (bool indexed : {true, false}) {
    testing::TempDir dir;
    BOOST_REQUIRE(::mkfifo((dir.path / "model-00001.safetensors").c_str(), 0600) == 0);
    if (indexed) {
      json index = {{"weight_map", {{"a", "model-00001.safetensors"}}}};
      std::ofstream(dir.path / "model.safetensors.index.json") << index.dump();
    }
    auto open = std::async(std::launch::async, [&] {
      try {
        model_loader::Checkpoint::open(dir.path);
      } catch (const protocol::ValueError& e) {
        return std::string(e.what());
      }
      return std::string();
    });
    BOOST_REQUIRE_MESSAGE(open.wait_for(std::chrono::seconds(10)) == std::future_status::ready,
                          "opening a FIFO shard must not block");
    BOOST_TEST(open.get().find("is a FIFO; hotswap reads only regular files") != std::string::npos);
  }
  testing::TempDir dir;
  std::filesystem::create_directory(dir.path / "x.safetensors");
  HOTSWAP_CHECK_THROW_MSG(model_loader::Checkpoint::open(dir.path), protocol::ValueError,
                          "is a directory; hotswap reads only regular files");
}

BOOST_AUTO_TEST_CASE(a_tensor_in_two_files_or_no_files_at_all_is_an_error) {
  testing::TempDir dir;
  HOTSWAP_CHECK_THROW_MSG(model_loader::Checkpoint::open(dir.path), protocol::ValueError,
                          "contains no safetensors files");
  model_loader::save_safetensors((dir.path / "x.safetensors").string(), {{"a", at::arange(2)}});
  model_loader::save_safetensors((dir.path / "y.safetensors").string(), {{"a", at::arange(2)}});
  HOTSWAP_CHECK_THROW_MSG(model_loader::Checkpoint::open(dir.path), protocol::ValueError,
                          "tensor 'a' appears in both");
  HOTSWAP_CHECK_THROW_MSG(model_loader::Checkpoint::open(dir.path / "missing"),
                          protocol::ValueError, "does not exist or is not a directory");
}

BOOST_AUTO_TEST_SUITE_END()
