#include "protocol/chunk_plan.hpp"

#include "protocol/errors.hpp"

namespace hotswap::protocol {
namespace {

void append(Chunk& chunk, std::size_t index, std::uint64_t size) {
  chunk.slices.push_back(ChunkSlice{index, chunk.size_bytes, size});
  chunk.size_bytes += size;
}

}  // namespace

ChunkPlan plan_nccl_chunks(std::span<const ParamMeta> params, std::uint64_t buffer_size_bytes) {
  ChunkPlan plan;
  Chunk current;
  for (std::size_t i = 0; i < params.size(); ++i) {
    append(current, i, params[i].nbytes());
    if (current.size_bytes > buffer_size_bytes) {
      plan.push_back(std::move(current));
      current = Chunk{};
    }
  }
  if (!current.slices.empty()) plan.push_back(std::move(current));
  return plan;
}

ChunkPlan plan_ipc_chunks(std::span<const ParamMeta> params, std::uint64_t buffer_size_bytes) {
  ChunkPlan plan;
  Chunk current;
  for (std::size_t i = 0; i < params.size(); ++i) {
    std::uint64_t size = params[i].nbytes();
    if (size > buffer_size_bytes) {
      throw ValueError(
          "Tensor '" + params[i].name + "' has size " + std::to_string(size) +
          " bytes, which exceeds buffer_size_bytes=" + std::to_string(buffer_size_bytes) +
          ". Increase buffer_size_bytes to at least " + std::to_string(size) + ".");
    }
    if (!current.slices.empty() && current.size_bytes + size > buffer_size_bytes) {
      plan.push_back(std::move(current));
      current = Chunk{};
    }
    append(current, i, size);
  }
  if (!current.slices.empty()) plan.push_back(std::move(current));
  return plan;
}

}  // namespace hotswap::protocol
