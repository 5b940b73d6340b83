#include "transport/arena_fence.hpp"

#include <cstring>

#include "protocol/errors.hpp"

namespace hotswap::transport {
namespace {

// "hsfence1", little-endian: what an arena's data area starts with where it has a fence.
constexpr std::uint64_t kMagic = 0x3165636e65667368ull;
constexpr std::size_t kChangesAt = 8, kFrozenAt = 16;

std::uint64_t* word(std::uint8_t* area, std::size_t at) {
  return reinterpret_cast<std::uint64_t*>(area + at);
}
const std::uint64_t* word(const std::uint8_t* area, std::size_t at) {
  return reinterpret_cast<const std::uint64_t*>(area + at);
}

// The worker maps the arena read-only: loads only, as the builtins allow on const memory.
std::uint64_t load(const std::uint8_t* area, std::size_t at) {
  return __atomic_load_n(word(area, at), __ATOMIC_ACQUIRE);
}
void store(std::uint8_t* area, std::size_t at, std::uint64_t value) {
  __atomic_store_n(word(area, at), value, __ATOMIC_RELEASE);
}

std::string describe(const ArenaFence::Stamp& stamp) {
  return stamp.frozen_round == 0 ? "released (the trainer may be writing it)"
                                 : "frozen for round " + std::to_string(stamp.frozen_round);
}

}  // namespace

void ArenaFence::format(std::uint8_t* area) {
  std::memset(area, 0, kBytes);
  std::memcpy(area, &kMagic, sizeof kMagic);
}

void ArenaFence::freeze(std::uint8_t* area, std::uint64_t round) {
  // The counter first: a worker that sees the new round also sees that something changed.
  store(area, kChangesAt, load(area, kChangesAt) + 1);
  store(area, kFrozenAt, round);
}

void ArenaFence::release(std::uint8_t* area) {
  store(area, kFrozenAt, 0);
  store(area, kChangesAt, load(area, kChangesAt) + 1);
}

std::optional<ArenaFence::Stamp> ArenaFence::read(const std::uint8_t* area,
                                                  std::size_t area_bytes) {
  if (area == nullptr || area_bytes < kBytes) return std::nullopt;
  std::uint64_t magic = 0;
  std::memcpy(&magic, area, sizeof magic);
  if (magic != kMagic) return std::nullopt;
  // Read twice until stable: a freeze or release between the two words is seen whole.
  for (;;) {
    const std::uint64_t changes = load(area, kChangesAt);
    const std::uint64_t frozen = load(area, kFrozenAt);
    if (load(area, kChangesAt) == changes) return Stamp{changes, frozen};
  }
}

std::optional<ArenaFence::Stamp> ArenaFence::check_before(const std::uint8_t* area,
                                                          std::size_t area_bytes,
                                                          std::uint64_t round,
                                                          const std::string& arena) {
  auto stamp = read(area, area_bytes);
  if (stamp && stamp->frozen_round != round) {
    throw protocol::TransferError(
        "the shared weight arena " + arena + " is " + describe(*stamp) + ", not for this round (" +
        std::to_string(round) +
        "): the trainer moved on before this worker began reading it; nothing of the round was "
        "loaded from it");
  }
  return stamp;
}

void ArenaFence::check_after(const std::uint8_t* area, std::size_t area_bytes,
                             const std::optional<Stamp>& before, std::uint64_t round,
                             const std::string& arena) {
  if (!before) return;
  const auto now = read(area, area_bytes);
  if (now && *now == *before) return;
  throw protocol::TransferError(
      "the shared weight arena " + arena + " changed while this worker read round " +
      std::to_string(round) + " from it (now " + (now ? describe(*now) : "without its fence") +
      "): the trainer released it or began another round before this worker finished, so its "
      "bytes may be another round's; the round fails and keeps nothing of them");
}

}  // namespace hotswap::transport
