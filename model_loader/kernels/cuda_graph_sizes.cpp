#include "model_loader/kernels/cuda_graph_sizes.hpp"

#include <algorithm>
#include <string>

#include "protocol/errors.hpp"

namespace hotswap::model_loader::kernels {

CudaGraphSizes::CudaGraphSizes(std::vector<std::int64_t> sizes, std::int64_t max_num_seqs,
                               bool enforce_eager) {
  if (enforce_eager) return;
  for (std::int64_t size : sizes) {
    if (size < 1) {
      throw protocol::ValueError("--cuda-graph-sizes: " + std::to_string(size) +
                                 ": a batch size is at least 1");
    }
  }
  if (sizes.empty()) sizes = default_sizes(max_num_seqs);
  std::erase_if(sizes, [&](std::int64_t size) { return size > max_num_seqs; });
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  sizes_ = std::move(sizes);
}

std::vector<std::int64_t> CudaGraphSizes::default_sizes(std::int64_t max_num_seqs) {
  std::vector<std::int64_t> sizes;
  for (std::int64_t size : {1, 2, 4}) {
    if (size <= max_num_seqs) sizes.push_back(size);
  }
  for (std::int64_t size = 8; size <= std::min<std::int64_t>(max_num_seqs, 256); size += 8) {
    sizes.push_back(size);
  }
  for (std::int64_t size = 272; size <= max_num_seqs; size += 16)
    sizes.push_back(size);
  if (max_num_seqs >= 1 && (sizes.empty() || sizes.back() != max_num_seqs)) {
    sizes.push_back(max_num_seqs);
  }
  return sizes;
}

std::optional<std::int64_t> CudaGraphSizes::bucket_for(std::int64_t sequences) const {
  const auto it = std::lower_bound(sizes_.begin(), sizes_.end(), sequences);
  if (it == sizes_.end()) return std::nullopt;
  return *it;
}

}  // namespace hotswap::model_loader::kernels
