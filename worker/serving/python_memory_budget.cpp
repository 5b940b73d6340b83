#include "worker/serving/python_memory_budget.hpp"

// Python.h first: it must come before any standard header.
#include <Python.h>

#include <malloc.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <limits>

namespace hotswap::worker {
namespace {

constexpr std::int64_t kUnbounded = std::numeric_limits<std::int64_t>::max();

// What the interpreter holds, as counted by the wrappers below. Blocks allocated before the
// wrappers were installed and freed after make it drift below the truth; a budget is measured
// from where it starts, so the drift does not matter.
std::atomic<std::int64_t> held{0};
// While a budget is alive: the thread it binds and the count its allocations may not pass.
std::atomic<bool> budgeted{false};
std::atomic<pthread_t> budgeted_thread{};
std::atomic<std::int64_t> ceiling{kUnbounded};
std::atomic<bool> refused{false};

// Once an allocation was refused, the interpreter unwinds (exception objects, tracebacks): small
// allocations get this much past the ceiling, so that it never runs out of the few MemoryError
// objects it keeps and dies (Py_FatalError) rather than failing the render.
constexpr std::int64_t kUnwindReserve = std::int64_t{8} << 20;

bool admit(std::size_t more) {
  if (!budgeted.load(std::memory_order_acquire)) return true;
  if (!pthread_equal(pthread_self(), budgeted_thread.load(std::memory_order_relaxed))) return true;
  std::int64_t limit = ceiling.load(std::memory_order_relaxed);
  if (refused.load(std::memory_order_relaxed) && limit < kUnbounded - kUnwindReserve) {
    limit += kUnwindReserve;
  }
  if (more <= static_cast<std::size_t>(kUnbounded / 2) &&
      held.load(std::memory_order_relaxed) + static_cast<std::int64_t>(more) <= limit) {
    return true;
  }
  refused.store(true, std::memory_order_relaxed);
  return false;
}

void count(void* block, int sign) {
  if (block != nullptr) {
    held.fetch_add(sign * static_cast<std::int64_t>(malloc_usable_size(block)),
                   std::memory_order_relaxed);
  }
}

// The allocator a wrapped domain had; the wrappers' context points at it.
PyMemAllocatorEx inner[3];
PyObjectArenaAllocator inner_arenas;

void* wrapped_malloc(void* context, std::size_t size) {
  auto* next = static_cast<PyMemAllocatorEx*>(context);
  if (!admit(size)) return nullptr;
  void* block = next->malloc(next->ctx, size);
  count(block, +1);
  return block;
}

void* wrapped_calloc(void* context, std::size_t count_of, std::size_t size) {
  auto* next = static_cast<PyMemAllocatorEx*>(context);
  const bool overflows = size != 0 && count_of > std::numeric_limits<std::size_t>::max() / size;
  if (overflows || !admit(count_of * size)) return nullptr;
  void* block = next->calloc(next->ctx, count_of, size);
  count(block, +1);
  return block;
}

void* wrapped_realloc(void* context, void* block, std::size_t size) {
  auto* next = static_cast<PyMemAllocatorEx*>(context);
  const std::size_t before = block == nullptr ? 0 : malloc_usable_size(block);
  if (size > before && !admit(size - before)) return nullptr;
  void* moved = next->realloc(next->ctx, block, size);
  if (moved != nullptr) {
    held.fetch_add(
        static_cast<std::int64_t>(malloc_usable_size(moved)) - static_cast<std::int64_t>(before),
        std::memory_order_relaxed);
  }
  return moved;
}

void wrapped_free(void* context, void* block) {
  auto* next = static_cast<PyMemAllocatorEx*>(context);
  count(block, -1);
  next->free(next->ctx, block);
}

void* wrapped_arena_alloc(void* context, std::size_t size) {
  auto* next = static_cast<PyObjectArenaAllocator*>(context);
  if (!admit(size)) return nullptr;
  void* arena = next->alloc(next->ctx, size);
  if (arena != nullptr) held.fetch_add(static_cast<std::int64_t>(size), std::memory_order_relaxed);
  return arena;
}

void wrapped_arena_free(void* context, void* arena, std::size_t size) {
  auto* next = static_cast<PyObjectArenaAllocator*>(context);
  held.fetch_sub(static_cast<std::int64_t>(size), std::memory_order_relaxed);
  next->free(next->ctx, arena, size);
}

}  // namespace

void PythonMemoryBudget::install() {
  const PyMemAllocatorDomain domains[] = {PYMEM_DOMAIN_RAW, PYMEM_DOMAIN_MEM, PYMEM_DOMAIN_OBJ};
  for (int d = 0; d < 3; ++d)
    PyMem_GetAllocator(domains[d], &inner[d]);
  // The raw domain is malloc (the interpreter is pre-initialized with a malloc-based allocator,
  // no debug hooks). The object domains are wrapped only where they are malloc too: under pymalloc
  // a block's size cannot be read back, and what pymalloc holds comes from its arenas (wrapped)
  // or, for blocks past 512 bytes, from the raw domain.
  for (int d = 0; d < 3; ++d) {
    if (d > 0 && inner[d].malloc != inner[0].malloc) continue;
    PyMemAllocatorEx wrapper{&inner[d], wrapped_malloc, wrapped_calloc, wrapped_realloc,
                             wrapped_free};
    PyMem_SetAllocator(domains[d], &wrapper);
  }
  PyObject_GetArenaAllocator(&inner_arenas);
  PyObjectArenaAllocator arenas{&inner_arenas, wrapped_arena_alloc, wrapped_arena_free};
  PyObject_SetArenaAllocator(&arenas);
}

PythonMemoryBudget::PythonMemoryBudget(std::size_t bytes) {
  refused.store(false, std::memory_order_relaxed);
  const std::int64_t now = held.load(std::memory_order_relaxed);
  ceiling.store(bytes >= static_cast<std::size_t>(kUnbounded / 2)
                    ? kUnbounded
                    : now + static_cast<std::int64_t>(bytes),
                std::memory_order_relaxed);
  budgeted_thread.store(pthread_self(), std::memory_order_relaxed);
  budgeted.store(true, std::memory_order_release);
}

PythonMemoryBudget::~PythonMemoryBudget() {
  budgeted.store(false, std::memory_order_release);
}

bool PythonMemoryBudget::exceeded() const {
  return refused.load(std::memory_order_relaxed);
}

}  // namespace hotswap::worker
