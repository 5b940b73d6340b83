// Bulk byte copies for the data planes: a trainer filling a shared-memory buffer or a packed
// gloo chunk, a worker copying a received tensor into its staged storage.
//
// Why not memcpy: a bulk copy's destination is not read again before it has left the caches
// (a 100 MB tensor is three times the L3 of the machines this was measured on), so streaming
// (non-temporal) stores, which skip the read-for-ownership of every destination line, move the
// bytes faster. glibc switches to its own streaming path only for copies of about 192 MiB and
// more; tensors are smaller. Measured on a 2-core AMD EPYC (AVX2): 128 MiB at 6.1-10 GB/s
// against memcpy's 3.9-4.8 GB/s, and two such copies at once (a ring's two sides) at 6.5 GB/s
// each. See docs/benchmarks.md.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace hotswap::transport {

// Copies below this go through memcpy: small enough that their destination may still be in
// a cache when it is read.
inline constexpr std::size_t kStreamingCopyBytes = std::size_t{1} << 20;

// Which loop copy_bytes runs; tests drive each one on any CPU.
enum class CopyKernel {
  kBest,      // streaming stores where the CPU has AVX2, else memcpy
  kMemcpy,    // memcpy whatever the size
  kStreaming  // streaming stores (AVX2) whatever the size; memcpy on a CPU without AVX2
};

// Copies `bytes` from `src` to `dst` (not overlapping), as memcpy does; with streaming stores
// from kStreamingCopyBytes on. Any alignment.
void copy_bytes(void* dst, const void* src, std::size_t bytes,
                CopyKernel kernel = CopyKernel::kBest);

// dst.copy_(src), through copy_bytes when both are contiguous CPU tensors of one dtype and
// shape (every received tensor on a CPU worker), else through libtorch's copy (conversions,
// strides, devices).
void copy_tensor(const at::Tensor& dst, const at::Tensor& src);

}  // namespace hotswap::transport
