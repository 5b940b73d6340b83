// Reads and writes of shared memory that another process may shrink under us. A trainer that
// ftruncates its segment (a bug, or a crash in the middle of re-creating it) leaves our mapping
// pointing past the end of the file, and the next access raises SIGBUS, which would kill the
// worker. Every access a worker makes to a trainer's segment goes through these functions
// instead: a SIGBUS inside one is caught on the faulting thread, the access reports failure,
// and the caller fails the round with an error. A SIGBUS anywhere else is left to the handler
// that was installed before (or to the default action).
//
// Only plain memory accesses run under the guard (no locks, no allocation, no C++ objects with
// destructors), which is what makes jumping out of the signal handler safe.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hotswap::transport {

// memcpy(dst, src, n); false if it faulted (the destination may then be partly written).
bool guarded_copy(void* dst, const void* src, std::size_t n) noexcept;

// The same, split over libtorch's intra-op threads for large copies, each part guarded on its
// own thread: a copy from shared memory into a model runs at the speed of libtorch's own copy.
bool guarded_parallel_copy(void* dst, const void* src, std::size_t n);

// An atomic counter in shared memory: load (acquire) and add (acq_rel); false if it faulted.
bool guarded_load(const std::atomic<std::uint64_t>& counter, std::uint64_t& value) noexcept;
bool guarded_add(std::atomic<std::uint64_t>& counter, std::uint64_t delta) noexcept;

}  // namespace hotswap::transport
