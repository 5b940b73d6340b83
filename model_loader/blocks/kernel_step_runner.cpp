#include "model_loader/blocks/kernel_step_runner.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>

#include "model_loader/kernels/flashinfer_kernels.hpp"
#include "model_loader/kv_cache_budget.hpp"

namespace hotswap::model_loader {

KernelStepRunner::KernelStepRunner(std::unique_ptr<kernels::StepKernels> kernels,
                                   std::shared_ptr<kernels::GraphRecorder> recorder,
                                   kernels::CudaGraphSizes sizes, std::shared_ptr<KvBlockPool> pool,
                                   std::int64_t max_model_len, std::int64_t vocab_size,
                                   c10::Device device)
    : kernels_(std::move(kernels)),
      pool_(std::move(pool)),
      max_model_len_(max_model_len),
      vocab_size_(vocab_size),
      device_(device) {
  if (recorder != nullptr && !sizes.empty()) {
    graphs_ = std::make_unique<kernels::DecodeGraphCache>(std::move(sizes), std::move(recorder));
    pool_->reserve(scratch_, 1);  // one block, held for as long as the graphs may pad
  }
}

std::uint64_t KernelStepRunner::device_bytes(const ModelConfig& config,
                                             const kernels::CudaGraphSizes& sizes,
                                             std::int64_t element_size) {
  std::uint64_t bytes =
      kernels::kAttentionFloatWorkspaceBytes + kernels::kAttentionIntWorkspaceBytes +
      static_cast<std::uint64_t>(config.max_position_embeddings * config.head_dim) * 4;
  if (!sizes.empty()) {
    const std::int64_t rows = sizes.sizes().back();
    bytes += estimate_step_activation_bytes(config, rows, rows, element_size) +
             static_cast<std::uint64_t>(rows * config.vocab_size) * 4;
  }
  return bytes;
}

KernelStepRunner::~KernelStepRunner() {
  if (graphs_ != nullptr) graphs_->clear();  // before the buffers they read go
}

at::Tensor KernelStepRunner::forward(const at::Tensor& tokens, std::vector<ForwardSlice>& slices,
                                     bool all_positions, std::span<const void* const> weights,
                                     const Body& body) {
  std::lock_guard lock(mutex_);
  const at::Tensor ids = checked_step_tokens(tokens, slices, vocab_size_);
  for (const auto& s : slices)
    pool_->reserve(*s.cache, s.num_tokens);
  // A decode step has a graph when a size holds its sequences and every row's pages fit a
  // row of the graphs' metadata.
  const std::int64_t block_size = pool_->block_size();
  const std::int64_t max_blocks = max_blocks_per_row();
  const bool graphed =
      graphs_ != nullptr && !all_positions &&
      graphs_->sizes().bucket_for(static_cast<std::int64_t>(slices.size())).has_value() &&
      std::all_of(slices.begin(), slices.end(), [&](const ForwardSlice& s) {
        return s.num_tokens == 1 && s.cache->length / block_size < max_blocks;
      });
  at::Tensor logits = graphed ? decode_with_graph(ids, slices, weights, body)
                              : eager(ids, slices, all_positions, body);
  for (auto& s : slices)
    s.cache->length += s.num_tokens;
  return logits;
}

at::Tensor KernelStepRunner::eager(const at::Tensor& ids, const std::vector<ForwardSlice>& slices,
                                   bool all_positions, const Body& body) {
  std::vector<kernels::KernelStepSequence> sequences;
  sequences.reserve(slices.size());
  for (const auto& s : slices)
    sequences.push_back({s.cache->length, s.num_tokens, s.cache->blocks()});
  const auto step = kernels::KernelStepInputs::make(sequences, pool_->block_size(), device_);
  kernels_->plan(step, /*for_cuda_graph=*/false);
  at::Tensor returned;
  if (!all_positions) {
    std::vector<std::int64_t> last;
    for (std::size_t i = 1; i < step.q_indptr_host.size(); ++i)
      last.push_back(step.q_indptr_host[i] - 1);
    returned = at::tensor(last, at::TensorOptions().dtype(at::kLong)).to(device_);
  }
  return body(ids.to(device_), step, returned);
}

std::int64_t KernelStepRunner::max_blocks_per_row() const {
  return pool_->blocks_for(max_model_len_);
}

void KernelStepRunner::allocate_buffers() {
  const std::int64_t max_rows = graphs_->sizes().sizes().back();
  metadata_.emplace(max_rows, max_blocks_per_row(), pool_->block_size(), scratch_.blocks().front());
  const auto total = static_cast<std::int64_t>(metadata_->sections().total);
  const auto ints = at::TensorOptions().dtype(at::kInt);
  host_image_ = at::empty({total}, device_.is_cuda() ? ints.pinned_memory(true) : ints);
  device_image_ = at::zeros({total}, ints.device(device_));
  logits_ =
      at::empty({max_rows, vocab_size_}, at::TensorOptions().dtype(at::kFloat).device(device_));
}

at::Tensor KernelStepRunner::decode_with_graph(const at::Tensor& ids,
                                               const std::vector<ForwardSlice>& slices,
                                               std::span<const void* const> weights,
                                               const Body& body) {
  if (!metadata_) allocate_buffers();
  const auto n = static_cast<std::int64_t>(slices.size());
  std::vector<kernels::DecodeRow> rows;
  rows.reserve(slices.size());
  // The ids go into the host image: read where they are (the host, for every caller here).
  const at::Tensor host_ids = ids.device().is_cpu() ? ids : ids.to(at::kCPU);
  const auto* id = host_ids.data_ptr<std::int64_t>();
  for (std::size_t i = 0; i < slices.size(); ++i) {
    rows.push_back({static_cast<std::int32_t>(id[i]),
                    static_cast<std::int32_t>(slices[i].cache->length), slices[i].cache->blocks()});
  }
  // Every address a graph reads or writes: the weights, the cache's layers, the buffers.
  std::vector<const void*> addresses(weights.begin(), weights.end());
  for (std::int64_t l = 0; l < pool_->shape().layers; ++l) {
    addresses.push_back(pool_->keys(l).data_ptr());
    addresses.push_back(pool_->values(l).data_ptr());
  }
  addresses.push_back(device_image_.data_ptr());
  addresses.push_back(logits_.data_ptr());
  const auto& sections = metadata_->sections();
  graphs_->run(
      kernels::storage_key(addresses), n,
      [&](std::int64_t padded) {
        metadata_->fill(rows, padded);
        const auto image = metadata_->image();
        std::memcpy(host_image_.data_ptr(), image.data(), image.size_bytes());
        device_image_.copy_(host_image_, /*non_blocking=*/true);
        decode_step_ = kernels::KernelStepInputs::of_decode(*metadata_, device_image_);
        kernels_->plan(decode_step_, /*for_cuda_graph=*/true);
      },
      [&](std::int64_t padded) {
        const at::Tensor step_ids =
            device_image_.narrow(0, static_cast<std::int64_t>(sections.tokens), padded);
        logits_.narrow(0, 0, padded).copy_(body(step_ids, decode_step_, at::Tensor()));
      });
  // The caller keeps the logits past the next step, which overwrites the buffer.
  return logits_.narrow(0, 0, n).clone();
}

}  // namespace hotswap::model_loader
