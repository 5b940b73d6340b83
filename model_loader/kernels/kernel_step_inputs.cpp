#include <ATen/ops/from_blob.h>

#include <numeric>
#include <string>

#include "model_loader/kernels/step_kernels.hpp"
#include "protocol/errors.hpp"

namespace hotswap::model_loader::kernels {

KernelStepInputs KernelStepInputs::make(std::span<const KernelStepSequence> sequences,
                                        std::int64_t block_size, c10::Device device) {
  KernelStepInputs step;
  step.sequences = static_cast<std::int64_t>(sequences.size());
  step.q_indptr_host.assign(1, 0);
  step.page_indptr_host.assign(1, 0);
  std::vector<std::int32_t> positions, sequence_of, pages, last_page_len;
  for (std::size_t i = 0; i < sequences.size(); ++i) {
    const KernelStepSequence& s = sequences[i];
    const std::int64_t last = s.start + s.num_tokens - 1;
    const std::int64_t used = last / block_size + 1;  // blocks holding 0 .. last
    if (s.num_tokens < 1 || s.start < 0 || static_cast<std::int64_t>(s.blocks.size()) < used) {
      throw protocol::ValueError("kernel step: sequence " + std::to_string(i) + " of " +
                                 std::to_string(s.num_tokens) + " tokens from position " +
                                 std::to_string(s.start) + " needs " + std::to_string(used) +
                                 " blocks of " + std::to_string(block_size) + "; it holds " +
                                 std::to_string(s.blocks.size()));
    }
    for (std::int64_t t = 0; t < s.num_tokens; ++t) {
      positions.push_back(static_cast<std::int32_t>(s.start + t));
      sequence_of.push_back(static_cast<std::int32_t>(i));
    }
    pages.insert(pages.end(), s.blocks.begin(), s.blocks.begin() + used);
    last_page_len.push_back(static_cast<std::int32_t>(last % block_size + 1));
    step.q_indptr_host.push_back(step.q_indptr_host.back() +
                                 static_cast<std::int32_t>(s.num_tokens));
    step.page_indptr_host.push_back(static_cast<std::int32_t>(pages.size()));
  }
  step.rows = step.q_indptr_host.back();
  step.decode = step.rows == step.sequences;
  // One host image, one copy: positions, sequence_of, q_indptr, page_indptr, last_page_len,
  // page_indices.
  std::vector<std::int32_t> image;
  std::vector<std::size_t> starts;
  for (const auto* part : {&positions, &sequence_of, &step.q_indptr_host, &step.page_indptr_host,
                           &last_page_len, &pages}) {
    starts.push_back(image.size());
    image.insert(image.end(), part->begin(), part->end());
  }
  at::Tensor on_device =
      at::from_blob(image.data(), {static_cast<std::int64_t>(image.size())}, at::kInt)
          .to(device, /*non_blocking=*/false, /*copy=*/true);
  auto view = [&](std::size_t part, std::size_t count) {
    return on_device.narrow(0, static_cast<std::int64_t>(starts[part]),
                            static_cast<std::int64_t>(count));
  };
  const auto n = static_cast<std::size_t>(step.sequences);
  step.positions = view(0, positions.size());
  step.sequence_of = view(1, sequence_of.size());
  step.q_indptr = view(2, n + 1);
  step.page_indptr = view(3, n + 1);
  step.last_page_len = view(4, n);
  step.page_indices = view(5, pages.size());
  return step;
}

KernelStepInputs KernelStepInputs::of_decode(const DecodeStepMetadata& metadata,
                                             const at::Tensor& image) {
  const auto& at = metadata.sections();
  const std::int64_t rows = metadata.rows();
  auto view = [&](std::size_t start, std::int64_t count) {
    return image.narrow(0, static_cast<std::int64_t>(start), count);
  };
  KernelStepInputs step;
  step.rows = rows;
  step.sequences = rows;
  step.decode = true;
  step.positions = view(at.positions, rows);
  step.sequence_of = view(at.row_of_token, rows);
  step.q_indptr = view(at.q_indptr, rows + 1);
  step.page_indptr = view(at.page_indptr, rows + 1);
  step.last_page_len = view(at.last_page_len, rows);
  auto indptr = metadata.section(at.page_indptr, static_cast<std::size_t>(rows) + 1);
  step.page_indptr_host.assign(indptr.begin(), indptr.end());
  // The whole section: its size does not change with the step, as a captured graph needs.
  step.page_indices = view(at.page_indices, static_cast<std::int64_t>(at.total - at.page_indices));
  step.q_indptr_host.resize(static_cast<std::size_t>(rows) + 1);
  std::iota(step.q_indptr_host.begin(), step.q_indptr_host.end(), 0);
  return step;
}

}  // namespace hotswap::model_loader::kernels
