#include "trainer_sdk/weight_source.hpp"

#include "protocol/errors.hpp"
#include "protocol/layerwise_groups.hpp"

namespace hotswap::trainer_sdk {
namespace {

// Batches a WeightStream into the groups it must follow, checking the order.
class CheckedGroupStream final : public GroupStream {
 public:
  CheckedGroupStream(std::vector<std::vector<std::string>> groups,
                     std::unique_ptr<WeightStream> stream)
      : groups_(std::move(groups)), stream_(std::move(stream)) {}

  std::optional<WeightGroup> next() override {
    if (next_group_ == groups_.size()) return std::nullopt;
    WeightGroup batch;
    for (const auto& expected : groups_[next_group_]) {
      auto item = stream_->next();
      if (!item) {
        throw protocol::RuntimeError("WeightSource ended but expected '" + expected +
                                     "'; iteration order must match metadata().");
      }
      if (item->name != expected) {
        throw protocol::RuntimeError("WeightSource yielded '" + item->name + "' but expected '" +
                                     expected + "'; iteration order must match metadata().");
      }
      batch.names.push_back(std::move(item->name));
      batch.tensors.push_back(std::move(item->tensor));
    }
    ++next_group_;
    return batch;
  }

 private:
  std::vector<std::vector<std::string>> groups_;
  std::unique_ptr<WeightStream> stream_;
  std::size_t next_group_ = 0;
};

}  // namespace

WeightStream::~WeightStream() = default;
GroupStream::~GroupStream() = default;
WeightSource::~WeightSource() = default;

std::vector<std::vector<std::string>> WeightSource::groups() {
  std::vector<std::string> names;
  for (auto& meta : metadata())
    names.push_back(std::move(meta.name));
  auto all = protocol::layerwise_groups(names);
  auto held = held_names();
  if (!held) return all;
  std::vector<std::vector<std::string>> mine;
  for (auto& group : all) {
    for (const auto& name : group) {
      if (held->contains(name)) {
        mine.push_back(std::move(group));
        break;
      }
    }
  }
  return mine;
}

std::unique_ptr<GroupStream> WeightSource::iter_groups() {
  return std::make_unique<CheckedGroupStream>(groups(), iter());
}

}  // namespace hotswap::trainer_sdk
