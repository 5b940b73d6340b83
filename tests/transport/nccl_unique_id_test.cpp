// The NCCL unique id's pickle, held against the exact bytes vLLM 0.33 writes
// (tests/golden/make_nccl_unique_id_golden.py), and against pickles that are not it.
#include "transport/nccl_unique_id.hpp"

#include <boost/test/unit_test.hpp>

#include <fstream>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"
#include "test_support.hpp"

using namespace hotswap;
using transport::NcclUniqueId;

namespace {

nlohmann::json golden() {
  return nlohmann::json::parse(
      std::ifstream(std::string(HOTSWAP_GOLDEN_DIR) + "/vllm/nccl_unique_id.json"));
}

std::string from_hex(const std::string& hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

NcclUniqueId golden_id() {
  std::string raw = from_hex(golden()["unique_id_hex"]);
  NcclUniqueId id{};
  std::copy(raw.begin(), raw.end(), id.begin());
  return id;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(nccl_unique_id)

BOOST_AUTO_TEST_CASE(reads_the_id_out_of_vllms_pickles_at_protocols_3_4_and_5) {
  // Held in a variable: a range-for over a temporary's member reads freed memory (ASan).
  const auto g = golden();
  for (const auto& [protocol, hex] : g["pickles_hex"].items()) {
    BOOST_TEST((transport::unique_id_from_pickle(from_hex(hex)) == golden_id()),
               "protocol " << protocol);
  }
}

BOOST_AUTO_TEST_CASE(writes_what_cpython_writes_for_vllms_class) {
  auto g = golden();
  BOOST_TEST(g["class_module"] == std::string(transport::kVllmUniqueIdModule));
  BOOST_TEST((transport::pickle_unique_id(golden_id()) == from_hex(g["pickles_hex"]["4"])));
  BOOST_TEST(
      (transport::unique_id_from_pickle(transport::pickle_unique_id(golden_id())) == golden_id()));
  BOOST_TEST(transport::stateless_broadcast_key(0, 0) == "broadcast_from/0/0");
}

BOOST_AUTO_TEST_CASE(refuses_everything_else_naming_what_it_found) {
  const std::string good = from_hex(golden()["pickles_hex"]["4"]);
  using protocol::ValueError;
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle(""), ValueError,
                          "it ends at byte 0, in the middle of an opcode");
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle(good.substr(0, 100)), ValueError,
                          "it ends at byte 100");
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle(good + "x"), ValueError,
                          "1 bytes follow the STOP opcode");
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle("\x80\x02."), ValueError,
                          "pickle protocol 2 is not read");
  // Found by fuzzing: bytes of the pickle quoted in the message are escaped, so the message is
  // valid UTF-8 and its JSON-RPC error reply can be built.
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle("\x8c\x01\xff."), ValueError,
                          "the string '\\xff'");
  // pickle.dumps(os.system) at protocol 4: a global, but no _ctypes._unpickle call.
  HOTSWAP_CHECK_THROW_MSG(
      transport::unique_id_from_pickle(std::string("\x80\x04\x95\x15\0\0\0\0\0\0\0\x8c\x05posix"
                                                   "\x94\x8c\x06system\x94\x93\x94.",
                                                   31)),
      ValueError,
      "expected _ctypes._unpickle(<class>, ({}, <128 bytes>)), got the global posix.system");
  // BINGET (memo read) and other opcodes the id's pickle never uses.
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle(std::string("\x80\x04h\x00.", 5)),
                          ValueError,
                          "opcode 0x68 at byte 2: an opcode vLLM's ncclUniqueId pickle never uses");
  // The same pickle with 127 id bytes.
  std::string short_id = good;
  const auto at = short_id.find(std::string("C\x80", 2));
  short_id.replace(at, 2, std::string("C\x7f", 2));
  short_id.erase(at + 2, 1);
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle(short_id), ValueError,
                          "the pickled ncclUniqueId holds 127 bytes");
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle(std::string(5000, '(')), ValueError,
                          "more than any ncclUniqueId pickle");
  HOTSWAP_CHECK_THROW_MSG(transport::unique_id_from_pickle("\x80\x04" + std::string(40, '(')),
                          ValueError, "its stack grows deeper");
}

BOOST_AUTO_TEST_SUITE_END()
