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
// The stream window. Through whole-chunk buffers every byte is copied twice (trainer in,
// worker out) through memory: the buffer is far larger than the caches, so both copies pay
// for DRAM, and two streaming copies at once run at 1.4-1.7x one memcpy here. When every
// consumer has joined the window (join_window, at its handshake), a round can instead pass
// each chunk through a small circular window at the start of its buffer: chunk byte x lives at
// window[x % W] while in flight, the producer writes a piece only once every consumer has
// copied out what was there before (each reports its progress in its own line of a table
// in front of the window), and where the two sides run on cores of one last-level cache a 2 MiB
// window stays in it, so the bytes cross memory once on the way in (the trainer's read of its
// tensor) and once on the way out (the worker's streaming store into its staged rows), as one
// memcpy's do. Where they do not share one, every piece crosses between caches and the window
// is slower than whole chunks: it is the trainer's choice (ShmTrainerInitInfo::stream_window). Data
// area in window mode:
//   [0, kProgressBytes)          one 64-byte line per consumer: bytes of the chunk it copied out
//   [kProgressBytes, +W)         the window
// A round says it uses the window (`stream_window_bytes` in its update_info); an older consumer
// never joins, so a producer that sees fewer joined than consumers sends whole chunks.
//
// The control block's counters are lock-free atomics in the shared mapping; waits poll with a
// short backoff and end with a TimeoutError, so a dead peer never hangs either side. The
// consumer (a worker) maps the producer's segments under a BusFaultGuard: a trainer that
// shrinks a segment fails the round with a TransferError, it cannot crash the worker.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
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
  // The stream window: its size where the buffer has room, the piece each side moves between
  // two progress reports, and the progress table in front of it. Measured on a 2-core AMD EPYC
  // VM whose cores shared a cache (docs/benchmarks.md): windows of 1-2 MiB in pieces of
  // 128-512 KiB were 1.15-1.25x one memcpy, 16 MiB was 1.8x (out of the caches).
  static constexpr std::size_t kWindowBytes = std::size_t{2} << 20;
  static constexpr std::size_t kWindowPieceBytes = std::size_t{256} << 10;
  static constexpr std::size_t kMaxWindowConsumers = 64;
  static constexpr std::size_t kProgressBytes = 64 * kMaxWindowConsumers;

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
  // Producer: no chunk numbered below `end` will come (a round that failed on the trainer's side,
  // say on a bad tensor from its source). Consumers waiting for one fail at once with a
  // TransferError instead of waiting out their timeout, so the worker is free for the next round
  // as soon as the trainer is. A consumer of an older build does not look, and times out.
  void abandon_below(std::uint64_t end);

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

  // Consumer: takes a line of the progress table, once, after its handshake succeeded. False
  // (and no line) when the buffers are too small for a window or the table is full: this
  // consumer then only takes whole chunks.
  bool join_window();
  bool joined_window() const { return window_consumer_ >= 0; }
  // Producer: the window a round may use, once every consumer has joined it; 0 while any has
  // not (an older consumer), or where the buffers have no room for one.
  std::size_t window_bytes() const;
  // The largest window `buffer_bytes` leaves room for (0: none).
  static std::size_t window_room(std::size_t buffer_bytes);

  // Producer: bytes [offset, offset + n) of chunk `sequence` (acquired for writing), copied
  // through a window of `window` bytes piece by piece, each as soon as every consumer has
  // copied out the bytes it replaces. `check` runs while waiting and may throw (a worker that
  // failed); TimeoutError after `timeout` without progress.
  void write_through_window(std::uint64_t sequence, std::uint64_t offset, const std::uint8_t* from,
                            std::size_t n, std::size_t window, std::chrono::milliseconds timeout,
                            const std::function<void()>& check);
  // Producer: bytes [offset, offset + n) of chunk `sequence` (acquired for writing) into the
  // ring, each piece made visible as it lands: at their place in the buffer (window 0, advancing
  // every kStreamPieceBytes), or through a window of that size (write_through_window).
  void copy_in(std::uint64_t sequence, std::uint64_t offset, const std::uint8_t* from,
               std::size_t n, std::size_t window, std::chrono::milliseconds timeout,
               const std::function<void()>& check);
  // Consumer: the same bytes out, each piece as soon as it is in, right behind the producer.
  void copy_out(std::uint64_t sequence, std::uint64_t offset, std::uint8_t* to, std::size_t n,
                std::size_t window, std::chrono::milliseconds timeout,
                const std::atomic<bool>* producer_gone = nullptr);

  // Consumer: ValueError unless this consumer joined and `window` fits the buffers.
  void check_window(std::size_t window) const;
  // Consumer (joined): bytes [offset, offset + n) of chunk `sequence` out of the window, piece by
  // piece right behind the producer, reporting each in the progress table. Errors as
  // acquire_for_read's.
  void read_through_window(std::uint64_t sequence, std::uint64_t offset, std::uint8_t* to,
                           std::size_t n, std::size_t window, std::chrono::milliseconds timeout,
                           const std::atomic<bool>* producer_gone = nullptr);

 private:
  struct Control {
    std::atomic<std::uint64_t> published;         // sequence number of the chunk in the data area
    std::atomic<std::uint64_t> released;          // consumers done with it
    std::atomic<std::uint64_t> consumers;         // how many must release each chunk
    std::atomic<std::uint64_t> filling;           // sequence number of the chunk being copied in
    std::atomic<std::uint64_t> filled;            // bytes of it in the data area so far
    std::atomic<std::uint64_t> window_consumers;  // consumers that joined the window (slot 0)
    std::atomic<std::uint64_t> abandoned_below;   // chunks below it will not come (slot 0)
  };
  static_assert(sizeof(Control) <= kControlBytes);
  Control& control(std::size_t slot) const;
  static bool free_to_write(const Control& h);
  std::uint8_t* data(std::size_t slot) const { return segments_[slot].payload() + kControlBytes; }
  std::atomic<std::uint64_t>& progress(std::size_t slot, std::size_t consumer) const;
  std::uint8_t* window(std::size_t slot) const { return data(slot) + kProgressBytes; }
  std::size_t window_consumers() const;  // lines of the progress table in use
  void wait_for_chunk(std::uint64_t sequence, std::size_t bytes, std::chrono::milliseconds timeout,
                      const std::atomic<bool>* producer_gone);

  std::vector<ShmSegment> segments_;
  std::size_t buffer_bytes_ = 0;
  std::int64_t window_consumer_ = -1;  // this consumer's line in the progress table
};

}  // namespace hotswap::transport
