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

ShmRing::Header& ShmRing::header(std::size_t slot) const {
  return *std::launder(reinterpret_cast<Header*>(segments_[slot].data()));
}

ShmRing ShmRing::create(const std::vector<std::string>& names, std::size_t buffer_bytes,
                        int consumers) {
  ShmRing ring;
  ring.buffer_bytes_ = buffer_bytes;
  for (const auto& name : names) {
    ring.segments_.push_back(ShmSegment::create(name, kHeaderBytes + buffer_bytes));
    auto* h = new (ring.segments_.back().data()) Header{};
    h->published.store(0);
    h->released.store(0);
    h->consumers.store(static_cast<std::uint64_t>(consumers));
  }
  return ring;
}

ShmRing ShmRing::open(const std::vector<std::string>& names) {
  ShmRing ring;
  for (const auto& name : names) {
    ring.segments_.push_back(ShmSegment::open(name));
    if (ring.segments_.back().size() < kHeaderBytes) {
      throw protocol::ValueError("shared-memory segment " + name + " is too small to be hotswap's");
    }
    ring.buffer_bytes_ = ring.segments_.back().size() - kHeaderBytes;
  }
  return ring;
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
  Header& h = header(slot);
  // The slot is free once its last chunk (if any) was released by every consumer.
  bool free = wait_until(
      [&] {
        return h.published.load(std::memory_order_acquire) == 0 ||
               h.released.load(std::memory_order_acquire) >= h.consumers.load();
      },
      timeout);
  if (!free) {
    throw protocol::TimeoutError("shm: the workers did not release buffer " +
                                 segments_[slot].name() + " within " +
                                 std::to_string(timeout.count()) + " ms");
  }
  return data(slot);
}

void ShmRing::publish(std::uint64_t sequence) {
  Header& h = header(sequence % slots());
  h.released.store(0, std::memory_order_relaxed);
  h.published.store(sequence, std::memory_order_release);  // the data is visible from here
}

void ShmRing::drain(std::chrono::milliseconds timeout) {
  for (std::size_t slot = 0; slot < slots(); ++slot) {
    Header& h = header(slot);
    bool done = wait_until(
        [&] {
          return h.published.load(std::memory_order_acquire) == 0 ||
                 h.released.load(std::memory_order_acquire) >= h.consumers.load();
        },
        timeout);
    if (!done) {
      throw protocol::TimeoutError("shm: the workers did not finish reading " +
                                   segments_[slot].name() + " within " +
                                   std::to_string(timeout.count()) + " ms");
    }
  }
}

const std::uint8_t* ShmRing::acquire_for_read(std::uint64_t sequence,
                                              std::chrono::milliseconds timeout) {
  std::size_t slot = sequence % slots();
  Header& h = header(slot);
  if (!wait_until([&] { return h.published.load(std::memory_order_acquire) == sequence; },
                  timeout)) {
    throw protocol::TimeoutError("shm: chunk " + std::to_string(sequence) + " did not arrive in " +
                                 segments_[slot].name() + " within " +
                                 std::to_string(timeout.count()) + " ms");
  }
  return data(slot);
}

void ShmRing::release(std::uint64_t sequence) {
  header(sequence % slots()).released.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace hotswap::transport
