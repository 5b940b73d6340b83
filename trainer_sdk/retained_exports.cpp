#include "trainer_sdk/retained_exports.hpp"

#include <algorithm>
#include <iterator>
#include <mutex>

#include "trainer_sdk/weight_sync_client.hpp"

namespace hotswap::trainer_sdk {
namespace {

// Owners that no worker ever said it was done with. Never destroyed, not even at exit: freeing
// them from static destructors would be the very free under a live mapping this exists to
// prevent, and libtorch's allocator may be gone by then. The union keeps the member from being
// destroyed without a naked new.
struct KeptUntilExit {
  std::mutex mutex;
  std::vector<RetainedExports::Owner> owners;
};

KeptUntilExit& kept_until_exit() {
  union Never {
    Never() : kept() {}
    ~Never() {}
    KeptUntilExit kept;
  };
  static Never never;
  return never.kept;
}

}  // namespace

RetainedExports::~RetainedExports() {
  if (owners_.empty()) return;
  auto& kept = kept_until_exit();
  std::lock_guard lock(kept.mutex);
  kept.owners.insert(kept.owners.end(), std::make_move_iterator(owners_.begin()),
                     std::make_move_iterator(owners_.end()));
}

void RetainedExports::retain(Owner owner) {
  if (!owner) return;
  const bool held = std::any_of(owners_.begin(), owners_.end(),
                                [&](const Owner& o) { return o.get() == owner.get(); });
  if (!held) owners_.push_back(std::move(owner));
}

void RetainedExports::release_after(const std::function<void()>& confirming_call) {
  confirming_call();
  owners_.clear();
}

void RetainedExports::end_session(WeightSyncClient& client) noexcept {
  if (owners_.empty()) return;
  try {
    release_after([&] { client.abort_and_shutdown_weight_transfer_engine(); });
  } catch (...) {  // whatever the worker said, only its success frees: the rest is kept
  }
}

std::size_t exports_kept_until_exit() {
  auto& kept = kept_until_exit();
  std::lock_guard lock(kept.mutex);
  return kept.owners.size();
}

}  // namespace hotswap::trainer_sdk
