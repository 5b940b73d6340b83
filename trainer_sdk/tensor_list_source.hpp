// TensorListSource: a WeightSource over an ordered list of named tensors, the simplest source a
// trainer (or a test, or a benchmark) can hand an engine.
#pragma once

#include <map>

#include "trainer_sdk/weight_source.hpp"

namespace hotswap::trainer_sdk {

class TensorListSource : public WeightSource {
 public:
  // Every parameter held, in the given order. Metadata comes from the tensors themselves.
  explicit TensorListSource(std::vector<std::pair<std::string, at::Tensor>> tensors);

  // A rank holding part of a model: `metadata` describes the whole model, `held` the tensors of
  // this rank. Iteration covers exactly groups(), in order (the groups with nothing held here
  // are skipped), and yields an undefined tensor for the unheld names of the groups it visits.
  TensorListSource(std::vector<protocol::ParamMeta> metadata,
                   std::map<std::string, at::Tensor> held);

  std::vector<protocol::ParamMeta> metadata() override { return metadata_; }
  std::unique_ptr<WeightStream> iter() override;
  std::optional<std::unordered_set<std::string>> held_names() override;

 private:
  std::vector<protocol::ParamMeta> metadata_;
  std::map<std::string, at::Tensor> tensors_;
  bool holds_all_;
};

// The ParamMeta of a tensor: its wire dtype and full shape. ValueError for a dtype that has no
// name on the wire.
protocol::ParamMeta param_meta_of(const std::string& name, const at::Tensor& tensor);

}  // namespace hotswap::trainer_sdk
