#include "model_loader/safetensors_writer.hpp"

#include <ATen/ops/from_blob.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include <nlohmann/json.hpp>

#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"
#include "transport/posix_check.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::model_loader {
namespace {

using protocol::DType;

// The reference implementation sorts by its dtype enum, largest first, then by name. This is
// that enum's order for the dtypes hotswap knows.
int dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return 0;
    case DType::kUInt8:
      return 1;
    case DType::kInt8:
      return 2;
    case DType::kFloat8E5M2:
      return 3;
    case DType::kFloat8E4M3FN:
      return 4;
    case DType::kInt16:
      return 5;
    case DType::kFloat16:
      return 6;
    case DType::kBFloat16:
      return 7;
    case DType::kInt32:
      return 8;
    case DType::kFloat32:
      return 9;
    case DType::kFloat64:
      return 10;
    case DType::kInt64:
      return 11;
  }
  return 0;
}

}  // namespace

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> entries,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), temp_path_(path_ + ".tmp") {
  std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    int ra = dtype_rank(a.dtype), rb = dtype_rank(b.dtype);
    return ra != rb ? ra > rb : a.name < b.name;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::uint64_t offset = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto& e = entries[i];
    if (i > 0 && std::any_of(entries.begin(), entries.begin() + static_cast<long>(i),
                             [&](const auto& other) { return other.name == e.name; })) {
      throw protocol::ValueError("safetensors writer: tensor '" + e.name + "' appears twice");
    }
    if (e.name == "__metadata__") {
      throw protocol::ValueError("safetensors writer: '__metadata__' is not a tensor name");
    }
    std::uint64_t bytes = protocol::ParamMeta{e.name, e.dtype, e.shape}.nbytes();
    header[e.name] = {{"dtype", safetensors_dtype_name(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + bytes}}};
    layout_.push_back(SafetensorsTensorInfo{e.name, e.dtype, e.shape, offset, offset + bytes});
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  data_start_ = 8 + text.size();
  file_ = MappedFile::create(temp_path_, data_start_ + offset);
  std::uint64_t header_len = text.size();
  std::memcpy(file_.mutable_data(), &header_len, 8);
  std::memcpy(file_.mutable_data() + 8, text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!committed_) ::unlink(temp_path_.c_str());
}

at::Tensor SafetensorsWriter::tensor(std::string_view name) {
  for (const auto& info : layout_) {
    if (info.name != name) continue;
    auto options = at::TensorOptions().dtype(transport::to_scalar_type(info.dtype));
    return at::from_blob(file_.mutable_data() + data_start_ + info.begin, info.shape, options);
  }
  throw protocol::ValueError("safetensors writer: no tensor '" + std::string(name) + "' in " +
                             path_);
}

void SafetensorsWriter::commit() {
  file_.sync();
  file_ = MappedFile();
  HOTSWAP_POSIX_CHECK(std::rename(temp_path_.c_str(), path_.c_str()),
                      "rename " + temp_path_ + " to", path_);
  committed_ = true;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<SafetensorsEntry> entries;
  for (const auto& [name, t] : tensors) {
    entries.push_back({name, transport::from_scalar_type(t.scalar_type()), t.sizes().vec()});
  }
  SafetensorsWriter writer(path, std::move(entries), metadata);
  for (const auto& [name, t] : tensors) {
    if (t.numel() > 0) writer.tensor(name).copy_(t);
  }
  writer.commit();
}

}  // namespace hotswap::model_loader
