#include "model_loader/kernels/decode_graph_cache.hpp"

#include <cstring>
#include <utility>

#include "protocol/errors.hpp"

namespace hotswap::model_loader::kernels {

StorageKey storage_key(std::span<const void* const> addresses) {
  std::uint64_t digest = 14695981039346656037ull;  // FNV-1a, over each address's 8 bytes
  for (const void* address : addresses) {
    auto value = reinterpret_cast<std::uintptr_t>(address);
    for (int byte = 0; byte < 8; ++byte) {
      digest ^= (value >> (8 * byte)) & 0xff;
      digest *= 1099511628211ull;
    }
  }
  return StorageKey{digest};
}

namespace {

class EagerStepGraph : public StepGraph {
 public:
  explicit EagerStepGraph(std::function<void()> step) : step_(std::move(step)) {}
  void replay() override { step_(); }

 private:
  std::function<void()> step_;
};

}  // namespace

std::unique_ptr<StepGraph> EagerGraphRecorder::capture(const std::function<void()>& step) {
  step();  // a capture runs the step once, as a CUDA graph's warm-up and capture do
  return std::make_unique<EagerStepGraph>(step);
}

DecodeGraphCache::DecodeGraphCache(CudaGraphSizes sizes, std::shared_ptr<GraphRecorder> recorder,
                                   std::size_t storage_sets)
    : sizes_(std::move(sizes)), recorder_(std::move(recorder)), max_sets_(storage_sets) {
  if (!recorder_ || max_sets_ < 1) {
    throw protocol::ValueError("a decode graph cache needs a recorder and a storage set");
  }
}

DecodeGraphCache::GraphSet& DecodeGraphCache::set_for(StorageKey key) {
  for (auto it = sets_.begin(); it != sets_.end(); ++it) {
    if (it->first == key) {
      sets_.splice(sets_.begin(), sets_, it);  // now the most recently used
      return sets_.front().second;
    }
  }
  // A new storage: its graphs are captured as its steps come. The least recently used set goes
  // first, so its graphs (and the memory their pool holds) are freed before any new capture.
  while (sets_.size() >= max_sets_)
    sets_.pop_back();
  sets_.emplace_front(key, GraphSet{});
  return sets_.front().second;
}

DecodeGraphCache::StepRun DecodeGraphCache::run(
    StorageKey key, std::int64_t sequences, const std::function<void(std::int64_t rows)>& prepare,
    const std::function<void(std::int64_t rows)>& step) {
  StepRun ran;
  ran.bucket = sizes_.bucket_for(sequences);
  if (!ran.bucket) {
    prepare(sequences);
    step(sequences);
    ++eager_steps_;
    return ran;
  }
  const std::int64_t rows = *ran.bucket;
  GraphSet& graphs = set_for(key);
  prepare(rows);
  auto found = graphs.find(rows);
  if (found == graphs.end()) {
    // Capturing runs the step once: that run is this step's. The stand-in keeps this closure
    // and runs it at each replay, as a graph keeps the launches: like them, it may refer only to
    // buffers that outlive the graph, never to this step's locals.
    auto graph = recorder_->capture([step, rows] { step(rows); });
    graphs.emplace(rows, std::move(graph));
    ++captures_;
    ran.captured = true;
    return ran;
  }
  found->second->replay();
  ++replays_;
  return ran;
}

void DecodeGraphCache::clear() {
  sets_.clear();
}

std::size_t DecodeGraphCache::graphs() const {
  std::size_t total = 0;
  for (const auto& [key, graphs] : sets_)
    total += graphs.size();
  return total;
}

}  // namespace hotswap::model_loader::kernels
