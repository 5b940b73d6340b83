// DecodeGraphCache: which captured decode step serves a step, and when one is captured again.
//
// A CUDA graph replays its kernels over the raw device pointers it was captured with: the
// weights it read, the KV cache's tensors, the step's static input and output buffers. It may be
// replayed only while each of them is still where it was. A staged weight update commits by
// swapping the live tensors for the shadows it filled, and the next round fills the tensors that
// commit replaced (ParameterStore's spares), so the weights alternate between two sets of
// addresses: graphs are kept per StorageKey (a digest of every such pointer), for the two most
// recently used keys. A commit thus switches graph sets between two steps, capturing the new
// set's graphs on their first step; from the second update on, both sets exist and a commit
// costs nothing on the serving path. An in-place update writes into the live tensors, whose
// addresses (and key) do not change. Anything else that moves (the KV cache growing, a reload)
// changes the key the same way, and no graph is ever replayed over memory it did not capture.
//
// How a step is captured and replayed is a GraphRecorder's: libtorch's CUDA graphs on a GPU
// (cuda_graph_recorder.hpp), and EagerGraphRecorder, which runs the step again at each replay,
// everywhere else, so that this bookkeeping is tested without a GPU.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>

#include "model_loader/kernels/cuda_graph_sizes.hpp"

namespace hotswap::model_loader::kernels {

// A digest of the device addresses a step's graphs read and write.
struct StorageKey {
  std::uint64_t digest = 0;
  bool operator==(const StorageKey&) const = default;
};
// The key of `addresses`, in order (FNV-1a over their values).
StorageKey storage_key(std::span<const void* const> addresses);

// One captured step.
class StepGraph {
 public:
  virtual ~StepGraph() = default;
  virtual void replay() = 0;
};

class GraphRecorder {
 public:
  virtual ~GraphRecorder() = default;
  // Runs `step` once under capture and returns what replays it. The step must launch the same
  // work over the same buffers at every replay: what changes between steps goes into those
  // buffers before replay().
  virtual std::unique_ptr<StepGraph> capture(const std::function<void()>& step) = 0;
};

// The stand-in: a "graph" is the step itself, run again at each replay.
class EagerGraphRecorder : public GraphRecorder {
 public:
  std::unique_ptr<StepGraph> capture(const std::function<void()>& step) override;
};

class DecodeGraphCache {
 public:
  // Graphs for `sizes`, kept for at most `storage_sets` keys (two: the live weights and the
  // staged ones' next round).
  DecodeGraphCache(CudaGraphSizes sizes, std::shared_ptr<GraphRecorder> recorder,
                   std::size_t storage_sets = 2);

  // How a step ran.
  struct StepRun {
    std::optional<std::int64_t> bucket;  // the padded batch size; nullopt: eagerly
    bool captured = false;               // its graph was captured by this step
  };
  // Runs a decode step of `sequences` rows over the storage `key`. `prepare(rows)` fills the
  // static inputs for `rows` rows (the sequences, then padding); `step(rows)` launches the
  // step's work over them. With a bucket: prepare, then replay its graph (capturing it first,
  // which runs the step once). Without one: prepare and step with rows = sequences, eagerly.
  StepRun run(StorageKey key, std::int64_t sequences,
              const std::function<void(std::int64_t rows)>& prepare,
              const std::function<void(std::int64_t rows)>& step);

  // Drops every graph (before freeing memory a graph may read, e.g. at shutdown).
  void clear();

  const CudaGraphSizes& sizes() const { return sizes_; }
  std::size_t graphs() const;
  std::size_t storage_sets() const { return sets_.size(); }
  std::uint64_t captures() const { return captures_; }
  std::uint64_t replays() const { return replays_; }
  std::uint64_t eager_steps() const { return eager_steps_; }

 private:
  using GraphSet = std::map<std::int64_t, std::unique_ptr<StepGraph>>;  // by bucket
  GraphSet& set_for(StorageKey key);

  CudaGraphSizes sizes_;
  std::shared_ptr<GraphRecorder> recorder_;
  std::size_t max_sets_;
  // Most recently used first.
  std::list<std::pair<StorageKey, GraphSet>> sets_;
  std::uint64_t captures_ = 0;
  std::uint64_t replays_ = 0;
  std::uint64_t eager_steps_ = 0;
};

}  // namespace hotswap::model_loader::kernels
