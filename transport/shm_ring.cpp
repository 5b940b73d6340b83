#include "transport/shm_ring.hpp"

#include <new>
#include <thread>

#include "protocol/errors.hpp"

namespace hotswap::transport {
namespace {

static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "shared-memory counters must be lock-free to work across processes");

// Polls `done` until it holds or `timeout` passes; backs off from spinning to 1 ms sleeps.
template <class Done>
bool wait_until(Done done, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(1);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
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

const std::uint8_t* ShmRing::acquire_for_read(std::uint64_t sequence, std::size_t bytes,
                                              std::chrono::milliseconds timeout,
                                              const std::atomic<bool>* producer_gone) {
  std::size_t slot = sequence % slots();
  const Control& h = control(slot);
  const std::string& name = segments_[slot].name();
  const ShmSegment& segment = segments_[slot];
  bool faulted = false, gone = false;
  const bool arrived = wait_until(
      [&] {
        // `filling` before `filled`: a count read after the chunk's number is its own.
        const bool streamed = h.filling.load(std::memory_order_acquire) == sequence &&
                              h.filled.load(std::memory_order_acquire) >= bytes;
        const bool published = h.published.load(std::memory_order_acquire) == sequence;
        faulted = segment.faulted();
        gone = producer_gone != nullptr && producer_gone->load();
        return faulted || gone || streamed || published;
      },
      timeout);
  if (faulted) {
    throw protocol::TransferError("shm: the buffer " + name +
                                  " no longer covers its control block (its trainer shrank it)");
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
  return data(slot);
}

void ShmRing::release(std::uint64_t sequence) {
  const std::size_t slot = sequence % slots();
  control(slot).released.fetch_add(1, std::memory_order_acq_rel);
  if (segments_[slot].faulted()) {
    throw protocol::TransferError("shm: the buffer " + segments_[slot].name() +
                                  " no longer covers its control block (its trainer shrank it)");
  }
}

}  // namespace hotswap::transport
