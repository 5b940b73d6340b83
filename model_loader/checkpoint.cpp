#include "model_loader/checkpoint.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "protocol/bounded_json.hpp"
#include "protocol/errors.hpp"
#include "transport/posix_check.hpp"

namespace hotswap::model_loader {

namespace fs = std::filesystem;

namespace {
// Real indexes list a few hundred thousand tensors at most: a few MB.
constexpr std::size_t kMaxIndexBytes = 64u << 20;
}  // namespace

Checkpoint Checkpoint::open(const fs::path& directory) {
  Checkpoint ckpt;
  ckpt.directory_ = directory;
  std::error_code ec;
  if (!fs::is_directory(directory, ec)) {
    throw protocol::ValueError("checkpoint directory " + directory.string() +
                               " does not exist or is not a directory");
  }

  std::vector<fs::path> shard_paths;
  std::map<std::string, std::string> weight_map;
  fs::path index_path = directory / "model.safetensors.index.json";
  if (fs::exists(index_path, ec)) {
    auto parsed =
        protocol::parse_bounded_json(read_regular_file(index_path.string(), kMaxIndexBytes));
    if (!parsed.ok()) throw protocol::ValueError(index_path.string() + " " + parsed.reason);
    const nlohmann::json& index = parsed.value;
    if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
      throw protocol::ValueError(index_path.string() +
                                 " is not a valid index: it needs a `weight_map` object");
    }
    for (const auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string() || file.get<std::string>().find('/') != std::string::npos) {
        throw protocol::ValueError(index_path.string() + ": weight_map['" + name +
                                   "'] must be a file name in the checkpoint directory");
      }
      weight_map[name] = file.get<std::string>();
      fs::path shard = directory / file.get<std::string>();
      if (std::find(shard_paths.begin(), shard_paths.end(), shard) == shard_paths.end()) {
        shard_paths.push_back(shard);
      }
    }
    std::sort(shard_paths.begin(), shard_paths.end());
  } else {
    // Every *.safetensors entry, whatever it is: one that is not a regular file (a FIFO, a
    // directory) is refused by name when it is opened, rather than skipped unseen.
    for (const auto& entry : fs::directory_iterator(directory)) {
      if (entry.path().extension() == ".safetensors") shard_paths.push_back(entry.path());
    }
    std::sort(shard_paths.begin(), shard_paths.end());
  }
  if (shard_paths.empty()) {
    throw protocol::ValueError("checkpoint directory " + directory.string() +
                               " contains no safetensors files");
  }

  for (const auto& path : shard_paths) {
    std::shared_ptr<SafetensorsFile> file;
    try {
      file = SafetensorsFile::open(path.string());
    } catch (const transport::PosixError& e) {
      throw protocol::ValueError("cannot open shard " + path.string() + ": " + e.reason());
    }
    std::size_t file_index = ckpt.files_.size();
    for (const auto& info : file->tensors()) {
      auto [it, inserted] = ckpt.where_.try_emplace(info.name, file_index, &info);
      if (!inserted) {
        throw protocol::ValueError("tensor '" + info.name + "' appears in both " +
                                   ckpt.files_[it->second.first]->path() + " and " + file->path());
      }
      if (!weight_map.empty()) {
        auto mapped = weight_map.find(info.name);
        if (mapped == weight_map.end() || directory / mapped->second != path) {
          throw protocol::ValueError(
              "tensor '" + info.name + "' is in " + path.string() + " but " + index_path.string() +
              (mapped == weight_map.end() ? " does not list it"
                                          : " places it in " + mapped->second));
        }
      }
      ckpt.names_.push_back(info.name);
      ckpt.total_bytes_ += info.nbytes();
    }
    ckpt.files_.push_back(std::move(file));
  }
  for (const auto& [name, file] : weight_map) {
    if (!ckpt.where_.contains(name)) {
      throw protocol::ValueError(index_path.string() + " lists tensor '" + name + "' in " + file +
                                 ", which does not hold it");
    }
  }
  return ckpt;
}

const SafetensorsTensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) {
    throw protocol::ValueError("checkpoint " + directory_.string() + " has no tensor '" + name +
                               "'");
  }
  return *it->second.second;
}

at::Tensor Checkpoint::tensor(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) info(name);  // throws the message
  return files_[it->second.first]->tensor(*it->second.second);
}

const SafetensorsFile* Checkpoint::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) info(name);  // throws the message
  return files_[it->second.first].get();
}

}  // namespace hotswap::model_loader
