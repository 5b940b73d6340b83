#include "transport/bus_fault_guard.hpp"

#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <mutex>

#include "protocol/errors.hpp"

namespace hotswap::transport {
namespace {

// The guarded ranges, read lock-free by the signal handler. A slot is free when end is 0.
struct Slot {
  std::atomic<std::uintptr_t> begin{0};
  std::atomic<std::uintptr_t> end{0};
  std::atomic<int> protection{0};
  std::atomic<bool> faulted{false};
};
constexpr int kSlots = 512;
Slot g_slots[kSlots];
std::mutex g_register;  // registration only; the handler never takes it
struct sigaction g_previous {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const auto address = reinterpret_cast<std::uintptr_t>(info->si_addr);
  for (auto& slot : g_slots) {
    const std::uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    const std::uintptr_t end = slot.end.load(std::memory_order_acquire);
    if (end == 0 || address < begin || address >= end) continue;
    const std::uintptr_t page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
    const std::uintptr_t from = address & ~(page - 1);
    // The raw system call: async-signal-safe, and no interposed wrapper runs here.
    const long mapped =
        ::syscall(SYS_mmap, from, end - from, slot.protection.load(std::memory_order_relaxed),
                  MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mapped == static_cast<long>(from)) {
      slot.faulted.store(true, std::memory_order_release);
      return;  // the faulting access runs again, on zeros
    }
    break;
  }
  // Not ours (or not repairable): whoever handled SIGBUS before gets it, the fault repeats.
  ::sigaction(SIGBUS, &g_previous, nullptr);
  (void)signal;
  (void)context;
}

// Installs the handler unless it is the one installed now: a test framework may have put its
// own back since the last guard.
void ensure_installed() {
  struct sigaction current {};
  ::sigaction(SIGBUS, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_sigbus) return;
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, &g_previous);
}

}  // namespace

BusFaultGuard::BusFaultGuard(void* begin, std::size_t size, int protection) : slot_(-1) {
  std::lock_guard lock(g_register);
  ensure_installed();
  for (int i = 0; i < kSlots; ++i) {
    if (g_slots[i].end.load() != 0) continue;
    const auto b = reinterpret_cast<std::uintptr_t>(begin);
    g_slots[i].faulted.store(false);
    g_slots[i].protection.store(protection);
    g_slots[i].begin.store(b, std::memory_order_release);
    g_slots[i].end.store(b + size, std::memory_order_release);
    slot_ = i;
    return;
  }
  throw protocol::RuntimeError("more than " + std::to_string(kSlots) +
                               " shared-memory mappings are open at once");
}

BusFaultGuard::~BusFaultGuard() {
  std::lock_guard lock(g_register);
  g_slots[slot_].end.store(0, std::memory_order_release);
  g_slots[slot_].begin.store(0, std::memory_order_release);
}

bool BusFaultGuard::faulted() const noexcept {
  return g_slots[slot_].faulted.load(std::memory_order_acquire);
}

}  // namespace hotswap::transport
