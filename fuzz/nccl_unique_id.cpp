// The pickled ncclUniqueId a trainer stores in vLLM's TCP rendezvous. The reader must refuse
// anything but the one shape vLLM writes, and read back every pickle hotswap itself writes.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_support.hpp"
#include "protocol/errors.hpp"
#include "transport/nccl_unique_id.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hotswap;
  using transport::NcclUniqueId;
  try {
    const NcclUniqueId id = transport::unique_id_from_pickle(fuzz::as_text(data, size));
    // What was read, written again as CPython would, reads back the same.
    const NcclUniqueId again = fuzz::must_succeed(
        "unique_id_from_pickle(pickle_unique_id(id))",
        [&] { return transport::unique_id_from_pickle(transport::pickle_unique_id(id)); });
    HOTSWAP_FUZZ_CHECK(again == id);
  } catch (const protocol::Error& e) {
    fuzz::check_error_reply(e);
  }
  if (size == transport::kNcclUniqueIdBytes) {
    NcclUniqueId id{};
    std::copy(data, data + size, id.begin());
    const NcclUniqueId again = fuzz::must_succeed(
        "unique_id_from_pickle(pickle_unique_id(id))",
        [&] { return transport::unique_id_from_pickle(transport::pickle_unique_id(id)); });
    HOTSWAP_FUZZ_CHECK(again == id);
  }
  return 0;
}
