// SafetensorsFile: a read-only safetensors file, memory-mapped, with zero-copy tensor views.
// Its header (safetensors_header.hpp) is validated before anything in it is trusted: a
// malformed file is a ValueError naming the file, the tensor and what is wrong.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "model_loader/mapped_file.hpp"
#include "model_loader/safetensors_header.hpp"
#include "protocol/dtype.hpp"

namespace hotswap::model_loader {

class SafetensorsFile : public std::enable_shared_from_this<SafetensorsFile> {
 public:
  // Opens and validates `path`. ValueError for a malformed file, RuntimeError for I/O.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  // Every tensor, in data-offset order.
  const std::vector<SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
  const SafetensorsTensorInfo* find(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }

  // A CPU tensor over the mapped bytes: zero-copy and READ-ONLY (writing to it faults), kept
  // alive with the mapping. Where the bytes are misaligned for the dtype it is an aligned copy.
  at::Tensor tensor(std::string_view name) const;
  at::Tensor tensor(const SafetensorsTensorInfo& info) const;

  // Copies `bytes` bytes at `offset` into the data section (a tensor's info.begin and up) into
  // `destination` with pread(): see MappedFile::read_at. Thread-safe.
  void read_data(std::uint64_t offset, std::uint8_t* destination, std::size_t bytes) const;

 private:
  explicit SafetensorsFile(MappedFile file) : file_(std::move(file)) {}

  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

}  // namespace hotswap::model_loader
