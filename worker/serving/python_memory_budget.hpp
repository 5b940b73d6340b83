// PythonMemoryBudget: a bound on the memory one chat-template render may take in the embedded
// interpreter. Time and output bounds stop a template that loops; they cannot stop a single C call
// that builds a huge object at once (`'x'|center(2000000000)`, a format width, a string grown by
// `~` in a loop between two time checks). The interpreter's allocators are wrapped to count the
// bytes it holds, and while a budget is alive the rendering thread's allocations past it fail:
// Python raises MemoryError, the render ends with an error, nothing else is touched.
//
// Counted: what the interpreter takes from malloc (CPython's "raw" domain, and every domain when
// it runs on malloc, as under AddressSanitizer) and pymalloc's arenas; a block's size is read back
// with malloc_usable_size when it is freed. Other threads' allocations (the watchdog taking the
// interpreter's lock, say) are never refused: a thread state that cannot be made is fatal.
#pragma once

#include <cstddef>

namespace hotswap::worker {

class PythonMemoryBudget {
 public:
  // Wraps the interpreter's allocators. Call once, after Py_PreInitialize and before
  // Py_InitializeFromConfig (CPython's rule for allocator hooks).
  static void install();

  // From here until destruction, the calling thread's allocations fail once the interpreter holds
  // more than `bytes` over what it holds now. One at a time (renders take turns).
  explicit PythonMemoryBudget(std::size_t bytes);
  ~PythonMemoryBudget();

  // Whether an allocation was refused under this budget.
  bool exceeded() const;

  PythonMemoryBudget(const PythonMemoryBudget&) = delete;
  PythonMemoryBudget& operator=(const PythonMemoryBudget&) = delete;
};

}  // namespace hotswap::worker
