// ArenaFence: which round's bytes a shared weight arena holds, so that a worker never takes a
// trainer's next bytes (or half of them) for the round it was asked to read.
//
// A trainer trains its weights in place in the arena; workers read them there during a round.
// If the trainer writes again while a worker still reads (the worker answered late and the
// trainer's round timed out, or the trainer began its next round), the worker would load a mix
// of two versions and report success. The fence is the arena's first 64 bytes, before any
// tensor: a magic, a counter bumped at every change, and the sequence of the round whose bytes
// the arena holds frozen (0: the trainer may write). The trainer freezes it for a round before
// its update_weights call goes out and releases it when the round ends, however it ends; a
// worker checks before it reads that the arena is frozen for its round (its update_info's
// first_sequence), and after, that nothing changed. An arena without the magic (a trainer of an
// older build) has no fence, and is read as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace hotswap::transport {

class ArenaFence {
 public:
  static constexpr std::size_t kBytes = 64;  // the fence's share of the arena's data area

  // What a worker reads: the change counter, and the round the bytes are frozen for (0: none).
  struct Stamp {
    std::uint64_t changes = 0;
    std::uint64_t frozen_round = 0;
    bool operator==(const Stamp&) const = default;
  };

  // Trainer side, over the arena's data area (writable, at least kBytes).
  static void format(std::uint8_t* area);
  static void freeze(std::uint8_t* area, std::uint64_t round);
  static void release(std::uint8_t* area);

  // Worker side: the stamp, or nullopt for an area of fewer than kBytes or without the magic.
  static std::optional<Stamp> read(const std::uint8_t* area, std::size_t area_bytes);
  // Before reading round `round`: a TransferError naming `arena` unless the stamp is frozen for
  // it. Returns the stamp to check after (nullopt: no fence).
  static std::optional<Stamp> check_before(const std::uint8_t* area, std::size_t area_bytes,
                                           std::uint64_t round, const std::string& arena);
  // After reading: a TransferError naming `arena` if the stamp moved since `before`.
  static void check_after(const std::uint8_t* area, std::size_t area_bytes,
                          const std::optional<Stamp>& before, std::uint64_t round,
                          const std::string& arena);
};

// Freezes a trainer's arena for one round, and releases it on every exit of the round.
class FrozenArenaRound {
 public:
  FrozenArenaRound(std::uint8_t* area, std::uint64_t round) : area_(area) {
    if (area_ != nullptr) ArenaFence::freeze(area_, round);
  }
  ~FrozenArenaRound() {
    if (area_ != nullptr) ArenaFence::release(area_);
  }
  FrozenArenaRound(const FrozenArenaRound&) = delete;
  FrozenArenaRound& operator=(const FrozenArenaRound&) = delete;

 private:
  std::uint8_t* area_;
};

}  // namespace hotswap::transport
