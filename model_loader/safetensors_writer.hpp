// SafetensorsWriter: writes a safetensors file the way the reference `safetensors` package does
// (tensors ordered by dtype, widest first, then by name, so every tensor is aligned for its
// dtype; compact JSON header padded with spaces to a multiple of 8), byte for byte. The file is
// laid out up front and filled in place through writable tensor views, so multi-GB synthetic
// checkpoints are written at memory speed; it appears under its name only on commit().
#pragma once

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model_loader/mapped_file.hpp"
#include "model_loader/safetensors_file.hpp"

namespace hotswap::model_loader {

struct SafetensorsEntry {
  std::string name;
  protocol::DType dtype = protocol::DType::kFloat32;
  std::vector<std::int64_t> shape;
};

class SafetensorsWriter {
 public:
  SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                    std::map<std::string, std::string> metadata = {});
  // Removes the unfinished temporary file unless commit() ran.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // A writable CPU view of the tensor's bytes in the new file.
  at::Tensor tensor(std::string_view name);
  // The tensors in file order (what `tensor` names), with their offsets.
  const std::vector<SafetensorsTensorInfo>& layout() const { return layout_; }

  // Flushes and atomically renames the file into place.
  void commit();

 private:
  std::string path_;
  std::string temp_path_;
  std::vector<SafetensorsTensorInfo> layout_;
  std::uint64_t data_start_ = 0;
  MappedFile file_;
  bool committed_ = false;
};

// Writes `tensors` (any dtype with a safetensors name, any device or layout) to `path`.
void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace hotswap::model_loader
