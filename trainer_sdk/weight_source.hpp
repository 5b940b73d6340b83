// WeightSource: *what* a trainer sends, as vLLM's WeightSource. Two channels that must agree
// element for element (same parameters, order, dtypes, shapes):
//
// - metadata(): name, wire dtype and full shape of every parameter, without transferring.
//   Receivers size buffers and chunk boundaries from it, so it describes the WHOLE model on
//   every rank, even where a rank holds only part of it.
// - iter(): a fresh pass of materialized (name, tensor) pairs each call. Ranks sharing a
//   parameter iterate in lockstep. A parameter this rank does not hold (held_names()) still
//   appears, with an undefined tensor, so that order checks stay aligned. When metadata names
//   owners (vLLM 0.34's ParamMeta::owners), a pass is vLLM's `iter_full()` instead: exactly the
//   parameters this rank owns, whole, in metadata order.
//
// groups() and iter_groups() batch the stream per layerwise group (protocol/layerwise_groups).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "protocol/param_meta.hpp"

namespace hotswap::trainer_sdk {

struct NamedWeight {
  std::string name;
  at::Tensor tensor;  // undefined when this rank does not hold the parameter

  bool held() const { return tensor.defined(); }
};

// One pass over a source.
class WeightStream {
 public:
  virtual ~WeightStream();
  // The next pair, or nullopt at the end of the pass.
  virtual std::optional<NamedWeight> next() = 0;
};

struct WeightGroup {
  std::vector<std::string> names;
  std::vector<at::Tensor> tensors;  // parallel to names; undefined where not held
};

class GroupStream {
 public:
  virtual ~GroupStream();
  virtual std::optional<WeightGroup> next() = 0;
};

class WeightSource {
 public:
  virtual ~WeightSource();

  virtual std::vector<protocol::ParamMeta> metadata() = 0;
  virtual std::unique_ptr<WeightStream> iter() = 0;

  // The parameters this rank holds, or nullopt for all of them.
  virtual std::optional<std::unordered_set<std::string>> held_names() { return std::nullopt; }

  // This rank's groups, in metadata order: layerwise_groups over metadata(), keeping the groups
  // that hold at least one held name (a group with nothing held here is not iterated at all).
  std::vector<std::vector<std::string>> groups();

  // One batch per group of groups(). The default drives iter() and checks, as it goes, that
  // names arrive in that order: a RuntimeError naming both names otherwise, since a rank that
  // iterates out of order would deadlock its peers. An override must yield the same batches.
  virtual std::unique_ptr<GroupStream> iter_groups();
};

}  // namespace hotswap::trainer_sdk
