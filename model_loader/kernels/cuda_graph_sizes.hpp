// CudaGraphSizes: the batch sizes a decode step is captured at as a CUDA graph (vLLM's
// --cuda-graph-sizes, none under --enforce-eager), and the one a step of n sequences is padded
// to. A graph replays a fixed launch sequence over fixed buffers, so it serves one batch size;
// a step of n sequences runs the graph of the smallest captured size that holds n, its extra
// rows padding, and a step larger than every captured size runs eagerly.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace hotswap::model_loader::kernels {

class CudaGraphSizes {
 public:
  // `sizes`: the flag's list, in any order (empty: vLLM's default list). Sizes above
  // `max_num_seqs` are dropped (no step is that large), as vLLM drops those above its limit; a
  // size below 1 is a ValueError naming it. `enforce_eager`: no size at all.
  CudaGraphSizes(std::vector<std::int64_t> sizes, std::int64_t max_num_seqs, bool enforce_eager);

  // vLLM's default capture list up to `max_num_seqs`: 1, 2, 4, then every multiple of 8 up to
  // 256 and every multiple of 16 after, and `max_num_seqs` itself, so that every step size
  // has a graph.
  static std::vector<std::int64_t> default_sizes(std::int64_t max_num_seqs);

  // Ascending, each once.
  const std::vector<std::int64_t>& sizes() const { return sizes_; }
  bool empty() const { return sizes_.empty(); }
  // The smallest size that holds `sequences` (>= 1); nullopt when none does: run eagerly.
  std::optional<std::int64_t> bucket_for(std::int64_t sequences) const;

 private:
  std::vector<std::int64_t> sizes_;
};

}  // namespace hotswap::model_loader::kernels
