// Checkpoint: a Hugging Face checkpoint directory's tensors, across one or many safetensors
// files. With `model.safetensors.index.json` its weight_map says which shard holds each tensor
// (and is checked against the shards); without one, every `*.safetensors` file in the directory
// is read. A tensor name present twice is an error naming both files.
#pragma once

#include <ATen/core/Tensor.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "model_loader/safetensors_file.hpp"

namespace hotswap::model_loader {

class Checkpoint {
 public:
  static Checkpoint open(const std::filesystem::path& directory);

  const std::filesystem::path& directory() const { return directory_; }
  // Every tensor name, shard by shard in file order, each shard in data-offset order.
  const std::vector<std::string>& names() const { return names_; }
  bool contains(const std::string& name) const { return where_.contains(name); }
  const SafetensorsTensorInfo& info(const std::string& name) const;
  // A zero-copy, read-only view (see SafetensorsFile::tensor).
  at::Tensor tensor(const std::string& name) const;
  // The shard that holds `name` (whose bytes its info() locates); ValueError for a name it lacks.
  const SafetensorsFile* file_of(const std::string& name) const;
  // Bytes of tensor data across all shards.
  std::uint64_t total_bytes() const { return total_bytes_; }
  const std::vector<std::shared_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::filesystem::path directory_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::vector<std::string> names_;
  std::map<std::string, std::pair<std::size_t, const SafetensorsTensorInfo*>> where_;
  std::uint64_t total_bytes_ = 0;
};

}  // namespace hotswap::model_loader
