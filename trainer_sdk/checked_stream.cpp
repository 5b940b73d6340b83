#include "trainer_sdk/checked_stream.hpp"

#include <unordered_map>

#include "protocol/errors.hpp"
#include "transport/torch_dtype.hpp"

namespace hotswap::trainer_sdk {
RankShare RankShare::of(int rank, const std::vector<protocol::ParamMeta>& meta,
                        const std::vector<std::int64_t>& senders,
                        const std::vector<std::vector<std::string>>& groups) {
  RankShare share{rank, std::vector<bool>(meta.size()), std::vector<bool>(meta.size())};
  std::unordered_map<std::string_view, std::size_t> index;
  for (std::size_t i = 0; i < meta.size(); ++i)
    index.emplace(meta[i].name, i);
  for (const auto& group : groups) {
    for (const auto& name : group) {
      if (auto it = index.find(name); it != index.end()) share.visits[it->second] = true;
    }
  }
  for (std::size_t i = 0; i < meta.size(); ++i) {
    share.sends[i] = senders[i] == rank;
    if (share.sends[i] && !share.visits[i]) {
      throw protocol::ValueError("trainer rank " + std::to_string(rank) + " sends '" +
                                 meta[i].name + "', but its groups() leave it out");
    }
  }
  return share;
}

namespace {

std::string describe(const std::string& name, const std::string& dtype,
                     const std::vector<std::int64_t>& shape) {
  return "'" + name + "' " + dtype + " " + protocol::shape_to_string(shape);
}

// The checks every yielded tensor passes against the metadata entry it stands for.
void check_against_metadata(const NamedWeight& item, const protocol::ParamMeta& expected,
                            std::size_t index) {
  const at::Tensor& t = item.tensor;
  if (t.is_meta()) {
    // A model built on the meta device (or a lazily initialized one) has shapes and no bytes.
    throw protocol::ValueError("WeightSource yielded '" + item.name +
                               "' as a meta tensor, which has no data to send; materialize the "
                               "parameter (to_empty() and load it) before a push");
  }
  bool same_dtype = false;
  try {
    same_dtype = transport::from_scalar_type(t.scalar_type()) == expected.dtype;
  } catch (const protocol::ValueError&) {
  }
  if (item.name != expected.name || !same_dtype || t.sizes().vec() != expected.shape) {
    throw protocol::ValueError(
        "WeightSource metadata disagrees with iteration at index " + std::to_string(index) +
        ": declared " +
        describe(expected.name, std::string(protocol::dtype_name(expected.dtype)), expected.shape) +
        ", got " + describe(item.name, c10::toString(t.scalar_type()), t.sizes().vec()) +
        ". Both channels must enumerate the same parameters in the same order.");
  }
}

}  // namespace

at::Tensor CheckedStream::next() {
  auto item = stream_->next();
  if (!item) {
    throw protocol::ValueError("WeightSource yielded " + std::to_string(sent_) +
                               " parameters but metadata declared " + std::to_string(meta_.size()) +
                               "; the worker is waiting for the rest.");
  }
  if (sent_ >= meta_.size()) {
    throw protocol::ValueError("WeightSource yielded more parameters than metadata declared (" +
                               std::to_string(meta_.size()) + "); first extra is '" + item->name +
                               "'.");
  }
  if (!item->held()) {
    throw protocol::ValueError("WeightSource yielded no tensor for '" + item->name +
                               "' on the sender, which must hold every parameter");
  }
  check_against_metadata(*item, meta_[sent_], sent_);
  ++sent_;
  return item->tensor.to(device_).contiguous();
}

at::Tensor CheckedStream::take(std::size_t index) {
  if (!share_) return next();
  while (cursor_ < index)
    (void)read_share(cursor_++);
  cursor_ = index + 1;
  return read_share(index);
}

at::Tensor CheckedStream::read_share(std::size_t index) {
  const auto& expected = meta_[index];
  if (!share_->visits[index]) return {};
  const std::string rank = "trainer rank " + std::to_string(share_->rank);
  auto item = stream_->next();
  if (!item) {
    throw protocol::ValueError("WeightSource on " + rank + " ended before '" + expected.name +
                               "'; iteration must cover exactly groups(), in metadata order.");
  }
  if (item->name != expected.name) {
    throw protocol::RuntimeError("WeightSource on " + rank + " yielded '" + item->name +
                                 "' but expected '" + expected.name +
                                 "'; iteration order must match metadata().");
  }
  if (item->held()) check_against_metadata(*item, expected, index);
  if (!share_->sends[index]) return {};
  if (!item->held()) {
    throw protocol::ValueError("WeightSource on " + rank + " yielded no tensor for '" +
                               expected.name + "', which its held_names() hold and it sends");
  }
  ++sent_;
  return item->tensor.to(device_).contiguous();
}

void CheckedStream::finish() {
  while (share_ && cursor_ < meta_.size())
    (void)read_share(cursor_++);
  if (!share_ && sent_ != meta_.size()) {
    throw protocol::ValueError("WeightSource yielded " + std::to_string(sent_) +
                               " parameters but metadata declared " + std::to_string(meta_.size()) +
                               "; the worker is waiting for the rest.");
  }
  if (auto extra = stream_->next()) {
    throw protocol::ValueError("WeightSource yielded more parameters than metadata declared (" +
                               std::to_string(meta_.size()) + "); first extra is '" + extra->name +
                               "'.");
  }
}

}  // namespace hotswap::trainer_sdk
