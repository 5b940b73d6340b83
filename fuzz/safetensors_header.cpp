// A safetensors file's bytes. The loader maps tensors straight out of the data area on the
// strength of an accepted header, so an accepted header must describe it exactly.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "fuzz/fuzz_support.hpp"
#include "model_loader/safetensors_header.hpp"
#include "protocol/dtype.hpp"
#include "protocol/errors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using hotswap::model_loader::SafetensorsHeader;
  std::optional<SafetensorsHeader> header;
  try {
    header =
        SafetensorsHeader::parse(std::span<const std::uint8_t>(data, size), "fuzz.safetensors");
  } catch (const hotswap::protocol::Error& e) {
    hotswap::fuzz::check_error_reply(e);
    return 0;
  }
  HOTSWAP_FUZZ_CHECK(header->data_start >= 8 && header->data_start <= size);
  const std::uint64_t data_size = size - header->data_start;
  // Sorted by begin, each starting where the previous ended, the last ending at the data's end.
  std::uint64_t cursor = 0;
  for (const auto& t : header->tensors) {
    HOTSWAP_FUZZ_CHECK(t.begin == cursor);
    HOTSWAP_FUZZ_CHECK(t.begin <= t.end && t.end <= data_size);
    std::uint64_t bytes = hotswap::protocol::item_size(t.dtype);
    for (std::int64_t d : t.shape) {
      HOTSWAP_FUZZ_CHECK(d >= 0);
      HOTSWAP_FUZZ_CHECK(!__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes));
    }
    HOTSWAP_FUZZ_CHECK(t.nbytes() == bytes);
    cursor = t.end;
  }
  HOTSWAP_FUZZ_CHECK(cursor == data_size);
  return 0;
}
