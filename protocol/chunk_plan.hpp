// The two packed-chunk rules, as pure functions from parameter metadata to a plan. Both sides
// compute the plan from metadata alone, so they cut the byte stream at the same places without
// any framing on the wire. A chunk is the concatenation, in metadata order, of each tensor's
// contiguous bytes: no header, no padding, offsets are plain prefix sums.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "protocol/param_meta.hpp"

namespace hotswap::protocol {

struct ChunkSlice {
  std::size_t param_index;  // index into the metadata list
  std::uint64_t offset;     // byte offset of this tensor inside its chunk
  std::uint64_t size;       // bytes
};

struct Chunk {
  std::vector<ChunkSlice> slices;  // consecutive parameters, in metadata order
  std::uint64_t size_bytes = 0;
};

using ChunkPlan = std::vector<Chunk>;

// vLLM's NCCL rule (packed_tensor.py): add each tensor to the current chunk, and close the chunk
// right after the tensor that pushes its total strictly past `buffer_size_bytes`. So a chunk
// may exceed the limit by its last tensor, an oversize tensor ends its own chunk, zero-byte
// tensors ride along, the final chunk holds any remainder, and no parameters means no chunks.
// With several broadcasters, each update_weights call carries one broadcaster's parameters and
// the rule runs on each call's list alone (vLLM 0.34).
ChunkPlan plan_nccl_chunks(std::span<const ParamMeta> params, std::uint64_t buffer_size_bytes);

// vLLM's IPC rule: one buffer of `buffer_size_bytes` reused for every chunk, so a chunk is
// flushed *before* a tensor that would overflow it and never exceeds the buffer. A tensor larger
// than the buffer is a ValueError with vLLM's message.
ChunkPlan plan_ipc_chunks(std::span<const ParamMeta> params, std::uint64_t buffer_size_bytes);

}  // namespace hotswap::protocol
