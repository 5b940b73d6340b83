// The header of a safetensors file, parsed and validated before anything in it is trusted, as
// llama.cpp's loader does. The format: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}) that
// starts with '{' and may be padded with spaces, then the data area, covered exactly by the
// tensors. A malformed header is a ValueError naming the file, the tensor and the fault. No
// libtorch here, so the fuzzer links it alone.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/dtype.hpp"

namespace hotswap::model_loader {

// Headers larger than this are refused before parsing (real ones are well under 10 MB).
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct SafetensorsTensorInfo {
  std::string name;
  protocol::DType dtype = protocol::DType::kFloat32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // offsets into the data area
  std::uint64_t end = 0;

  std::uint64_t nbytes() const { return end - begin; }
};

// The safetensors spelling of a dtype ("BF16") and back; ValueError for a name it does not know.
std::string_view safetensors_dtype_name(protocol::DType dtype);
protocol::DType dtype_from_safetensors_name(std::string_view name);

struct SafetensorsHeader {
  std::uint64_t data_start = 0;                 // 8 + N: where the data area begins
  std::vector<SafetensorsTensorInfo> tensors;   // in data-offset order
  std::map<std::string, std::string> metadata;  // __metadata__

  // Parses the header at the start of `file` (the whole file's bytes: the data area's size is
  // checked too). `path` names the file in messages.
  static SafetensorsHeader parse(std::span<const std::uint8_t> file, const std::string& path);
};

}  // namespace hotswap::model_loader
