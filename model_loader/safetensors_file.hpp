// SafetensorsFile: a read-only safetensors file, memory-mapped, with zero-copy tensor views.
// The format: an 8-byte little-endian header length N, N bytes of JSON
// ({name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {str: str}}), then
// the data area. The header is validated before anything in it is trusted, as llama.cpp's
// loader does: a malformed file is a ValueError naming the file, the tensor and what is wrong.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model_loader/mapped_file.hpp"
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

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Opens and validates `path`. ValueError for a malformed file, RuntimeError for I/O.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Every tensor, in data-offset order.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }
  const SafetensorsTensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // A CPU tensor over the mapped bytes: zero-copy and READ-ONLY (writing to it faults), kept
  // alive with the mapping. Where the bytes are misaligned for the dtype it is an aligned copy.
  at::Tensor tensor(std::string_view name) const;
  at::Tensor tensor(const SafetensorsTensorInfo& info) const;

 private:
  explicit SafetensorsFile(MappedFile file) : file_(std::move(file)) {}
  void parse_header();

  MappedFile file_;
  std::uint64_t data_start_ = 0;
  std::vector<SafetensorsTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> index_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace hotswap::model_loader
