#include "transport/shm_ring.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "protocol/errors.hpp"
#include "transport/byte_copy.hpp"

namespace hotswap::transport {
namespace {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "shared-memory counters must be lock-free to work across processes");

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls `done` until it holds or `timeout` passes. The other side's next piece is usually tens
// of microseconds away, less than one sleep costs (a sleep of 1 us takes ~60 us with Linux's
// default timer slack), so it spins first, then yields the core, then backs off to 1 ms sleeps
// for a peer that is busy elsewhere.
template <class Done>
bool wait_until(Done done, std::chrono::milliseconds timeout) {
  constexpr int kSpins = 2000;  // ~10-40 us of pause instructions
  for (int i = 0; i < kSpins; ++i) {
    if (done()) return true;
    cpu_relax();
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout;
  const auto stop_yielding = start + std::chrono::microseconds(500);
  auto pause = std::chrono::microseconds(1);
  while (!done()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    if (now < stop_yielding) {
      std::this_thread::yield();
      continue;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

bool ShmRing::free_to_write(const Control& h) {
  // Free once the chunk last copied in (if any) was released by every consumer; or when it was
  // never published: its round failed part-way and no consumer will finish reading it.
  const std::uint64_t published = h.published.load(std::memory_order_acquire);
  return published == 0 || h.filling.load(std::memory_order_acquire) != published ||
         h.released.load(std::memory_order_acquire) >= h.consumers.load();
}

ShmRing::Control& ShmRing::control(std::size_t slot) const {
  return *std::launder(reinterpret_cast<Control*>(segments_[slot].payload()));
}

ShmRing ShmRing::create(const std::vector<std::string>& names, std::size_t buffer_bytes,
                        int consumers) {
  ShmRing ring;
  ring.buffer_bytes_ = buffer_bytes;
  for (const auto& name : names) {
    ring.segments_.push_back(
        ShmSegment::create(name, ShmKind::kRingBuffer, kControlBytes + buffer_bytes));
    auto* c = new (ring.segments_.back().payload()) Control{};
    c->published.store(0);
    c->released.store(0);
    c->consumers.store(static_cast<std::uint64_t>(consumers));
    c->filling.store(0);
    c->filled.store(0);
  }
  return ring;
}

ShmRing ShmRing::open(const std::vector<std::string>& names) {
  ShmRing ring;
  for (const auto& name : names) {
    ring.segments_.push_back(
        ShmSegment::open(name, ShmKind::kRingBuffer, ShmSegment::Access::kReadWrite));
    const ShmSegment& s = ring.segments_.back();
    if (s.payload_size() <= kControlBytes) {
      throw protocol::ValueError("shared-memory segment " + name + " has no room for a buffer");
    }
    const ShmSegment& first = ring.segments_.front();
    if (s.payload_size() != first.payload_size() || s.creator().pid != first.creator().pid ||
        s.creator().start_time != first.creator().start_time) {
      throw protocol::ValueError("shared-memory segment " + name + " and " + first.name() +
                                 " were not made together (different size or creator); a ring's "
                                 "buffers come from one trainer");
    }
    ring.buffer_bytes_ = s.payload_size() - kControlBytes;
  }
  return ring;
}

void ShmRing::check_intact() const {
  for (const auto& s : segments_)
    s.check_intact();
}

bool ShmRing::faulted() const {
  for (const auto& s : segments_) {
    if (s.faulted()) return true;
  }
  return false;
}

std::vector<std::string> ShmRing::names() const {
  std::vector<std::string> out;
  for (const auto& s : segments_)
    out.push_back(s.name());
  return out;
}

std::uint8_t* ShmRing::acquire_for_write(std::uint64_t sequence,
                                         std::chrono::milliseconds timeout) {
  std::size_t slot = sequence % slots();
  Control& h = control(slot);
  bool free = wait_until([&] { return free_to_write(h); }, timeout);
  if (!free) {
    throw protocol::TimeoutError("shm: the workers did not release buffer " +
                                 segments_[slot].name() + " within " +
                                 std::to_string(timeout.count()) + " ms");
  }
  // Counted afresh from here, not at the publish: a streaming consumer may release the chunk
  // before the producer has published it.
  h.released.store(0, std::memory_order_relaxed);
  h.filled.store(0, std::memory_order_relaxed);
  // Consumers that joined the window report their progress through this chunk from zero. (In a
  // round that sends whole chunks this is chunk data, written over next.)
  if (window_bytes() > 0) {
    const std::size_t consumers = window_consumers();
    for (std::size_t c = 0; c < consumers; ++c)
      progress(slot, c).store(0, std::memory_order_relaxed);
  }
  h.filling.store(sequence, std::memory_order_release);
  return data(slot);
}

void ShmRing::advance(std::uint64_t sequence, std::size_t bytes) {
  control(sequence % slots()).filled.store(bytes, std::memory_order_release);
}

void ShmRing::publish(std::uint64_t sequence) {
  Control& h = control(sequence % slots());
  h.published.store(sequence, std::memory_order_release);  // the data is visible from here
}

void ShmRing::drain(std::chrono::milliseconds timeout) {
  for (std::size_t slot = 0; slot < slots(); ++slot) {
    Control& h = control(slot);
    bool done = wait_until([&] { return free_to_write(h); }, timeout);
    if (!done) {
      throw protocol::TimeoutError("shm: the workers did not finish reading " +
                                   segments_[slot].name() + " within " +
                                   std::to_string(timeout.count()) + " ms");
    }
  }
}

void ShmRing::abandon_below(std::uint64_t end) {
  auto& mark = control(0).abandoned_below;
  std::uint64_t seen = mark.load(std::memory_order_acquire);
  while (seen < end && !mark.compare_exchange_weak(seen, end, std::memory_order_acq_rel)) {
  }
}

void ShmRing::wait_for_chunk(std::uint64_t sequence, std::size_t bytes,
                             std::chrono::milliseconds timeout,
                             const std::atomic<bool>* producer_gone) {
  std::size_t slot = sequence % slots();
  const Control& h = control(slot);
  const std::string& name = segments_[slot].name();
  const ShmSegment& segment = segments_[slot];
  const Control& first = control(0);
  bool faulted = false, gone = false, abandoned = false;
  const bool arrived = wait_until(
      [&] {
        // `filling` before `filled`: a count read after the chunk's number is its own.
        const bool streamed = h.filling.load(std::memory_order_acquire) == sequence &&
                              h.filled.load(std::memory_order_acquire) >= bytes;
        const bool published = h.published.load(std::memory_order_acquire) == sequence;
        faulted = segment.faulted();
        if (faulted || streamed || published) return true;
        gone = producer_gone != nullptr && producer_gone->load();
        // Only a chunk that is not there yet is given up on: one already published is read to
        // the end and released, or its buffer would block the next round's writer.
        abandoned = first.abandoned_below.load(std::memory_order_acquire) > sequence;
        return gone || abandoned;
      },
      timeout);
  if (faulted) {
    throw protocol::TransferError("shm: the buffer " + name +
                                  " no longer covers its control block (its trainer shrank it)");
  }
  if (abandoned && !gone) {
    throw protocol::TransferError("shm: the trainer abandoned the round before chunk " +
                                  std::to_string(sequence) +
                                  " (it failed on its side; its error says why)");
  }
  if (gone) {
    throw protocol::TransferError("shm: the trainer (pid " + std::to_string(creator().pid) +
                                  ") that owns " + name + " exited before chunk " +
                                  std::to_string(sequence) + " arrived");
  }
  if (!arrived) {
    throw protocol::TimeoutError("shm: chunk " + std::to_string(sequence) + " (its first " +
                                 std::to_string(bytes) + " bytes) did not arrive in " + name +
                                 " within " + std::to_string(timeout.count()) + " ms");
  }
}

const std::uint8_t* ShmRing::acquire_for_read(std::uint64_t sequence, std::size_t bytes,
                                              std::chrono::milliseconds timeout,
                                              const std::atomic<bool>* producer_gone) {
  wait_for_chunk(sequence, bytes, timeout, producer_gone);
  return data(sequence % slots());
}

void ShmRing::release(std::uint64_t sequence) {
  const std::size_t slot = sequence % slots();
  control(slot).released.fetch_add(1, std::memory_order_acq_rel);
  if (segments_[slot].faulted()) {
    throw protocol::TransferError("shm: the buffer " + segments_[slot].name() +
                                  " no longer covers its control block (its trainer shrank it)");
  }
}

std::atomic<std::uint64_t>& ShmRing::progress(std::size_t slot, std::size_t consumer) const {
  return *std::launder(reinterpret_cast<std::atomic<std::uint64_t>*>(data(slot) + 64 * consumer));
}

std::size_t ShmRing::window_consumers() const {
  // Read again from the shared block, which any consumer can write: never past the table.
  return static_cast<std::size_t>(
      std::min<std::uint64_t>(control(0).consumers.load(), kMaxWindowConsumers));
}

std::size_t ShmRing::window_room(std::size_t buffer_bytes) {
  if (buffer_bytes < kProgressBytes + kWindowPieceBytes) return 0;
  const std::size_t room = buffer_bytes - kProgressBytes;
  return std::min(kWindowBytes, room - room % kWindowPieceBytes);
}

bool ShmRing::join_window() {
  if (window_consumer_ >= 0) return true;
  if (window_room(buffer_bytes_) == 0) return false;
  const std::uint64_t index = control(0).window_consumers.fetch_add(1, std::memory_order_acq_rel);
  if (index >= kMaxWindowConsumers) return false;
  window_consumer_ = static_cast<std::int64_t>(index);
  return true;
}

std::size_t ShmRing::window_bytes() const {
  const Control& h = control(0);
  const std::uint64_t consumers = h.consumers.load();
  // Exactly as many as consume: a consumer that joined twice (a handshake repeated on the same
  // buffers) leaves the count off, and whole chunks are always safe.
  if (consumers == 0 || consumers > kMaxWindowConsumers ||
      h.window_consumers.load(std::memory_order_acquire) != consumers) {
    return 0;
  }
  return window_room(buffer_bytes_);
}

void ShmRing::write_through_window(std::uint64_t sequence, std::uint64_t offset,
                                   const std::uint8_t* from, std::size_t n, std::size_t window,
                                   std::chrono::milliseconds timeout,
                                   const std::function<void()>& check) {
  const std::size_t slot = sequence % slots();
  const std::size_t consumers = window_consumers();
  std::uint8_t* base = this->window(slot);
  for (std::size_t done = 0; done < n;) {
    const std::uint64_t at = offset + done;
    const std::size_t place = at % window;
    const std::size_t len = std::min({kWindowPieceBytes, n - done, window - place});
    const std::uint64_t end = at + len;
    if (end > window) {
      // The bytes this piece replaces, [end - window - len, end - window), must be out.
      const std::uint64_t needed = end - window;
      std::size_t polls = 0;
      const bool free = wait_until(
          [&] {
            if (check && ++polls % 256 == 0) check();
            for (std::size_t c = 0; c < consumers; ++c) {
              if (progress(slot, c).load(std::memory_order_acquire) < needed) return false;
            }
            return true;
          },
          timeout);
      if (!free) {
        throw protocol::TimeoutError(
            "shm: the workers did not copy chunk " + std::to_string(sequence) + " out of " +
            segments_[slot].name() + " past byte " + std::to_string(needed) + " within " +
            std::to_string(timeout.count()) + " ms");
      }
    }
    // Regular stores: the window is read again within microseconds, from the cache.
    std::memcpy(base + place, from + done, len);
    control(slot).filled.store(end, std::memory_order_release);
    done += len;
  }
}

void ShmRing::check_window(std::size_t window) const {
  if (window_consumer_ < 0) {
    throw protocol::ValueError(
        "shm: the round streams through a window (`stream_window_bytes`), but this worker did "
        "not join the window of its buffers at the handshake");
  }
  if (window == 0 || window > window_room(buffer_bytes_)) {
    throw protocol::ValueError("shm: a stream window of " + std::to_string(window) +
                               " bytes does not fit buffers of " + std::to_string(buffer_bytes_) +
                               " bytes (at most " + std::to_string(window_room(buffer_bytes_)) +
                               ")");
  }
}

void ShmRing::read_through_window(std::uint64_t sequence, std::uint64_t offset, std::uint8_t* to,
                                  std::size_t n, std::size_t window,
                                  std::chrono::milliseconds timeout,
                                  const std::atomic<bool>* producer_gone) {
  check_window(window);
  const std::size_t slot = sequence % slots();
  const std::uint8_t* base = this->window(slot);
  auto& mine = progress(slot, static_cast<std::size_t>(window_consumer_));
  for (std::size_t done = 0; done < n;) {
    const std::uint64_t at = offset + done;
    const std::size_t place = at % window;
    const std::size_t len = std::min({kWindowPieceBytes, n - done, window - place});
    wait_for_chunk(sequence, at + len, timeout, producer_gone);
    // Streaming stores: the staged rows are not read again before they leave the caches, and
    // the window's lines stay for the producer's next piece.
    copy_bytes(to + done, base + place, len, CopyKernel::kStreaming);
    mine.store(at + len, std::memory_order_release);
    done += len;
  }
}

void ShmRing::copy_in(std::uint64_t sequence, std::uint64_t offset, const std::uint8_t* from,
                      std::size_t n, std::size_t window, std::chrono::milliseconds timeout,
                      const std::function<void()>& check) {
  if (window > 0) {
    write_through_window(sequence, offset, from, n, window, timeout, check);
    return;
  }
  std::uint8_t* out = data(sequence % slots()) + offset;
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(kStreamPieceBytes, n - done);
    copy_bytes(out + done, from + done, len);
    done += len;
    advance(sequence, offset + done);
  }
}

void ShmRing::copy_out(std::uint64_t sequence, std::uint64_t offset, std::uint8_t* to,
                       std::size_t n, std::size_t window, std::chrono::milliseconds timeout,
                       const std::atomic<bool>* producer_gone) {
  if (window > 0) {
    read_through_window(sequence, offset, to, n, window, timeout, producer_gone);
    return;
  }
  for (std::size_t done = 0; done < n;) {
    const std::size_t len = std::min(kStreamPieceBytes, n - done);
    const std::uint8_t* in =
        acquire_for_read(sequence, offset + done + len, timeout, producer_gone);
    copy_bytes(to + done, in + offset + done, len);
    done += len;
  }
}

}  // namespace hotswap::transport
