#include "model_loader/safetensors_file.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include <cstring>

#include "protocol/errors.hpp"
#include "protocol/param_meta.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::model_loader {

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> file(new SafetensorsFile(MappedFile::open_read_only(path)));
  file->header_ = SafetensorsHeader::parse({file->file_.data(), file->file_.size()}, path);
  for (std::size_t i = 0; i < file->header_.tensors.size(); ++i)
    file->index_.emplace(file->header_.tensors[i].name, i);
  return file;
}

const SafetensorsTensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

at::Tensor SafetensorsFile::tensor(std::string_view name) const {
  const auto* info = find(name);
  if (info == nullptr) {
    throw protocol::ValueError("no tensor '" + std::string(name) + "' in " + path());
  }
  return tensor(*info);
}

at::Tensor SafetensorsFile::tensor(const SafetensorsTensorInfo& info) const {
  auto options = at::TensorOptions().dtype(transport::to_scalar_type(info.dtype));
  const std::uint8_t* bytes =
      file_.data() == nullptr ? nullptr : file_.data() + header_.data_start + info.begin;
  std::size_t item = protocol::item_size(info.dtype);
  if (info.nbytes() == 0 || reinterpret_cast<std::uintptr_t>(bytes) % item != 0) {
    // Misaligned for its dtype (a writer that did not sort by alignment): copy out.
    at::Tensor copy = at::empty(info.shape, options);
    if (info.nbytes() > 0) std::memcpy(copy.data_ptr(), bytes, info.nbytes());
    return copy;
  }
  auto keep_alive = shared_from_this();
  return at::from_blob(
      const_cast<std::uint8_t*>(bytes), info.shape,
      [keep_alive](void*) mutable { keep_alive.reset(); }, options);
}

void SafetensorsFile::read_data(std::uint64_t offset, std::uint8_t* destination,
                                std::size_t bytes) const {
  file_.read_at(header_.data_start + offset, destination, bytes);
}

}  // namespace hotswap::model_loader
