// ShmRing: the shm data plane's buffers and their handshake. N segments (ShmKind::kRingBuffer),
// each, after the segment header, a 64-byte control block and a data area; a chunk with sequence
// number s travels in segment s % N.
//
//   producer: wait until every consumer has released the chunk the segment holds (all of them
//             must have copied it), copy the chunk in, then publish its sequence number;
//   consumer: wait until the segment publishes the sequence it expects, copy out, release.
//
// A chunk also streams: while copying it in, the producer advances a count of the bytes of the
// data area that already hold it, and a consumer that needs only a prefix can copy that out
// while the rest is still coming. A ring buffer is as large as the largest tensor, so a model
// travels in a few chunks; waiting for whole chunks left one side idle for the first and last
// of them (about a quarter of a 442 MB sync). Consumers that wait for the publish alone (an
// older build) work with a streaming producer, and the other way round.
//
// The control block's counters are lock-free atomics in the shared mapping; waits poll with a
// short backoff and end with a TimeoutError, so a dead peer never hangs either side. The
// consumer (a worker) maps the producer's segments under a BusFaultGuard: a trainer that
// shrinks a segment fails the round with a TransferError, it cannot crash the worker.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "transport/shm_segment.hpp"

namespace hotswap::transport {

class ShmRing {
 public:
  static constexpr std::size_t kControlBytes = 64;
  // How much a producer copies between two advances, and a consumer waits for at a time: small
  // enough that the two sides' copies overlap closely, large enough that the waits are few.
  static constexpr std::size_t kStreamPieceBytes = std::size_t{4} << 20;

  // Producer side: creates the segments (their names are what the consumers open).
  static ShmRing create(const std::vector<std::string>& names, std::size_t buffer_bytes,
                        int consumers);
  // Consumer side: opens segments a producer created, each checked (ShmSegment::open); they
  // must all be ring buffers of one creator and one size. ValueError naming the one that is not.
  static ShmRing open(const std::vector<std::string>& names);

  std::size_t buffer_bytes() const { return buffer_bytes_; }
  std::size_t slots() const { return segments_.size(); }
  std::vector<std::string> names() const;

  // Producer: the data area for chunk `sequence`, once every consumer released the chunk that
  // used the slot before (TimeoutError after `timeout`).
  std::uint8_t* acquire_for_write(std::uint64_t sequence, std::chrono::milliseconds timeout);
  // Producer: the first `bytes` of the data area now hold chunk `sequence` (never decreasing
  // until the publish).
  void advance(std::uint64_t sequence, std::size_t bytes);
  void publish(std::uint64_t sequence);
  // Producer: waits until every published chunk has been released by every consumer.
  void drain(std::chrono::milliseconds timeout);

  // Consumer: the data area once its first `bytes` hold chunk `sequence` (advanced that far, or
  // the whole chunk published): TimeoutError after `timeout`, TransferError at once when
  // `producer_gone` turns true or the segment faults. The producer may shrink the segment at
  // any time: check_intact() after reading the data area.
  const std::uint8_t* acquire_for_read(std::uint64_t sequence, std::size_t bytes,
                                       std::chrono::milliseconds timeout,
                                       const std::atomic<bool>* producer_gone = nullptr);
  void release(std::uint64_t sequence);
  // Consumer: TransferError if any segment shrank since it was opened.
  void check_intact() const;
  // Consumer: whether a read of any segment hit a shrunk page (see BusFaultGuard).
  bool faulted() const;
  // Who made the segments.
  const ProcessIdentity& creator() const { return segments_.front().creator(); }

 private:
  struct Control {
    std::atomic<std::uint64_t> published;  // sequence number of the chunk in the data area
    std::atomic<std::uint64_t> released;   // consumers done with it
    std::atomic<std::uint64_t> consumers;  // how many must release each chunk
    std::atomic<std::uint64_t> filling;    // sequence number of the chunk being copied in
    std::atomic<std::uint64_t> filled;     // bytes of it in the data area so far
  };
  static_assert(sizeof(Control) <= kControlBytes);
  Control& control(std::size_t slot) const;
  static bool free_to_write(const Control& h);
  std::uint8_t* data(std::size_t slot) const { return segments_[slot].payload() + kControlBytes; }

  std::vector<ShmSegment> segments_;
  std::size_t buffer_bytes_ = 0;
};

}  // namespace hotswap::transport
