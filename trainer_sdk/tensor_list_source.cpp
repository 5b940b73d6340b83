#include "trainer_sdk/tensor_list_source.hpp"

#include <algorithm>
#include <unordered_set>

#include "protocol/errors.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {
namespace {

class ListStream final : public WeightStream {
 public:
  ListStream(std::vector<NamedWeight> items) : items_(std::move(items)) {}
  std::optional<NamedWeight> next() override {
    if (next_ == items_.size()) return std::nullopt;
    return items_[next_++];
  }

 private:
  std::vector<NamedWeight> items_;
  std::size_t next_ = 0;
};

}  // namespace

protocol::ParamMeta param_meta_of(const std::string& name, const at::Tensor& tensor) {
  try {
    return protocol::ParamMeta{name, transport::from_scalar_type(tensor.scalar_type()),
                               tensor.sizes().vec()};
  } catch (const protocol::ValueError& e) {
    throw protocol::ValueError("'" + name + "': " + e.what());
  }
}

TensorListSource::TensorListSource(std::vector<std::pair<std::string, at::Tensor>> tensors)
    : holds_all_(true) {
  for (auto& [name, tensor] : tensors) {
    if (!tensor.defined()) {
      throw protocol::ValueError("TensorListSource: '" + name + "' has no tensor");
    }
    if (tensors_.contains(name)) {
      throw protocol::ValueError("TensorListSource: '" + name + "' appears twice");
    }
    metadata_.push_back(param_meta_of(name, tensor));
    tensors_.emplace(name, std::move(tensor));
  }
}

TensorListSource::TensorListSource(std::vector<protocol::ParamMeta> metadata,
                                   std::map<std::string, at::Tensor> held)
    : metadata_(std::move(metadata)), tensors_(std::move(held)), holds_all_(false) {
  std::unordered_set<std::string> declared;
  for (const auto& meta : metadata_)
    declared.insert(meta.name);
  for (const auto& [name, tensor] : tensors_) {
    if (!declared.contains(name)) {
      throw protocol::ValueError("TensorListSource: held tensor '" + name +
                                 "' is not in the metadata");
    }
    if (!tensor.defined()) {
      throw protocol::ValueError("TensorListSource: held tensor '" + name + "' is undefined");
    }
  }
}

std::optional<std::unordered_set<std::string>> TensorListSource::held_names() {
  if (holds_all_) return std::nullopt;
  std::unordered_set<std::string> names;
  for (const auto& [name, tensor] : tensors_)
    names.insert(name);
  return names;
}

std::unique_ptr<WeightStream> TensorListSource::iter() {
  std::vector<NamedWeight> items;
  items.reserve(metadata_.size());
  const bool owned = std::any_of(metadata_.begin(), metadata_.end(),
                                 [](const protocol::ParamMeta& m) { return m.owners.has_value(); });
  if (holds_all_) {
    for (const auto& meta : metadata_)
      items.push_back({meta.name, tensors_.at(meta.name)});
  } else if (owned) {
    // vLLM 0.34's iter_full: exactly the parameters this rank holds (owns), in metadata order.
    for (const auto& meta : metadata_) {
      if (auto it = tensors_.find(meta.name); it != tensors_.end()) {
        items.push_back({meta.name, it->second});
      }
    }
  } else {
    for (const auto& group : groups()) {
      for (const auto& name : group) {
        auto it = tensors_.find(name);
        items.push_back({name, it == tensors_.end() ? at::Tensor() : it->second});
      }
    }
  }
  return std::make_unique<ListStream>(std::move(items));
}

}  // namespace hotswap::trainer_sdk
