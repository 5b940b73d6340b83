#include "transport/guarded_copy.hpp"

#include <setjmp.h>
#include <signal.h>

#include <ATen/Parallel.h>

#include <cstring>
#include <mutex>

namespace hotswap::transport {
namespace {

// The jump target of the guarded access running on this thread, if any. Volatile: to the
// compiler the access in between (a memcpy) cannot read it, and it would drop the store.
thread_local sigjmp_buf* volatile t_guard = nullptr;
struct sigaction g_previous {};

void on_sigbus(int, siginfo_t*, void*) {
  if (sigjmp_buf* guard = t_guard) {
    t_guard = nullptr;
    siglongjmp(*guard, 1);
  }
  // Not one of ours: give the fault back to whoever handled it before. Returning re-runs the
  // faulting instruction, which faults again under that handler (or the default action).
  ::sigaction(SIGBUS, &g_previous, nullptr);
}

void install_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    // SA_NODEFER: SIGBUS stays unblocked after the jump, so sigsetjmp need not save the mask.
    action.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGBUS, &action, &g_previous);
  });
}

template <class Access>
bool run_guarded(Access access) noexcept {
  install_handler();
  sigjmp_buf guard;
  sigjmp_buf* const outer = t_guard;
  if (sigsetjmp(guard, 0) != 0) {
    t_guard = outer;
    return false;
  }
  t_guard = &guard;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  access();
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_guard = outer;
  return true;
}

}  // namespace

bool guarded_copy(void* dst, const void* src, std::size_t n) noexcept {
  if (n == 0) return true;
  return run_guarded([=] { std::memcpy(dst, src, n); });
}

bool guarded_parallel_copy(void* dst, const void* src, std::size_t n) {
  constexpr std::int64_t kGrain = 4 << 20;  // below this one thread copies faster alone
  std::atomic<bool> ok{true};
  at::parallel_for(0, static_cast<std::int64_t>(n), kGrain,
                   [&](std::int64_t begin, std::int64_t end) {
                     if (!guarded_copy(static_cast<std::uint8_t*>(dst) + begin,
                                       static_cast<const std::uint8_t*>(src) + begin,
                                       static_cast<std::size_t>(end - begin))) {
                       ok = false;
                     }
                   });
  return ok;
}

bool guarded_load(const std::atomic<std::uint64_t>& counter, std::uint64_t& value) noexcept {
  std::uint64_t read = 0;
  std::uint64_t* const out = &read;
  if (!run_guarded([&counter, out] { *out = counter.load(std::memory_order_acquire); })) {
    return false;
  }
  value = read;
  return true;
}

bool guarded_add(std::atomic<std::uint64_t>& counter, std::uint64_t delta) noexcept {
  return run_guarded([&counter, delta] { counter.fetch_add(delta, std::memory_order_acq_rel); });
}

}  // namespace hotswap::transport
