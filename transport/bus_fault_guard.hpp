// BusFaultGuard: makes a mapping of another process's shared memory safe to read from any
// thread. A trainer that ftruncates its segment (a bug, or a crash in the middle of re-creating
// it) leaves our mapping pointing past the end of the file, and the next access raises SIGBUS,
// which would kill the worker, and may be raised on a libtorch thread in the middle of its copy.
//
// While a guard lives, a SIGBUS at an address inside its range is repaired instead: the
// handler maps anonymous zero pages (same protection) over the range from the faulting page to
// its end, marks the guard faulted, and returns, so the access completes, reading zeros. The
// owner checks faulted() after each use and fails the round: zeros are never weights. A SIGBUS
// anywhere else goes to the handler installed before (or the default action).
#pragma once

#include <cstddef>

namespace hotswap::transport {

class BusFaultGuard {
 public:
  // Guards [begin, begin + size), mapped with `protection` (PROT_READ, optionally PROT_WRITE).
  // RuntimeError if too many guards are alive at once (hundreds).
  BusFaultGuard(void* begin, std::size_t size, int protection);
  ~BusFaultGuard();
  BusFaultGuard(const BusFaultGuard&) = delete;
  BusFaultGuard& operator=(const BusFaultGuard&) = delete;

  // Whether an access faulted (and part of the range now reads as zeros).
  bool faulted() const noexcept;

 private:
  int slot_;
};

}  // namespace hotswap::transport
