// ShmSegment: RAII over a POSIX shared-memory segment that hotswap made (shm_open + mmap).
//
// Every segment starts with a 64-byte header — magic, format version, kind (ring buffer or
// weight arena), total size, and the creator's uid, pid and process start time — and its name
// starts with "/hotswap-". A worker opens a segment only after checking all of it: the name, that
// it is a regular shared-memory object of the worker's own user, and every header field against
// what fstat says. So a control client that names some other segment gets an error, and nothing
// the worker did not verify is ever read as weights, written or unlinked.
//
// The creator makes it 0600 and exclusively (O_EXCL) and unlinks it when it goes away, on every
// exit path. A creator can die without doing so (SIGKILL): a worker then removes the segments of
// creators that are gone (unlink_if_orphaned, remove_orphans). A segment of a live creator is
// never removed by anyone else: it may be a trainer's arena, its model, which other workers
// still need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/shm_info.hpp"
#include "transport/bus_fault_guard.hpp"
#include "transport/process_watch.hpp"
#include "transport/unique_fd.hpp"

namespace hotswap::transport {

enum class ShmKind : std::uint32_t { kRingBuffer = 1, kWeightArena = 2 };

class ShmSegment {
 public:
  static constexpr std::size_t kHeaderBytes = 64;
  static constexpr std::string_view kNamePrefix = protocol::kShmNamePrefix;

  // Creates `name` ("/hotswap-...") with a header and `payload_bytes` after it; RuntimeError if
  // the name exists or the system refuses.
  static ShmSegment create(const std::string& name, ShmKind kind, std::size_t payload_bytes);

  // Opens a segment another hotswap process made, after checking it (see above): ValueError
  // naming the segment and what is wrong with it otherwise. kReadOnly maps it so that this side
  // can never write it.
  enum class Access { kReadWrite, kReadOnly };
  static ShmSegment open(const std::string& name, ShmKind kind, Access access);

  // Removes `name` if it is a hotswap segment of this user whose creator is gone; true if it
  // did. Never touches anything else.
  static bool unlink_if_orphaned(const std::string& name) noexcept;
  // Removes every such segment in /dev/shm; returns their names.
  static std::vector<std::string> remove_orphans() noexcept;

  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  // The bytes after the header.
  std::uint8_t* payload() const { return data_ == nullptr ? nullptr : data_ + kHeaderBytes; }
  std::size_t payload_size() const { return size_ < kHeaderBytes ? 0 : size_ - kHeaderBytes; }
  const std::string& name() const { return name_; }
  bool owner() const { return owner_; }
  const ProcessIdentity& creator() const { return creator_; }

  // Whether the segment is still whole: a trainer can shrink it at any time. A segment another
  // process made is mapped under a BusFaultGuard, so touching lost pages reads zeros instead of
  // killing this process; this says so. TransferError naming the segment when it shrank (since
  // the handshake, or under an access).
  void check_intact() const;
  bool faulted() const { return guard_ != nullptr && guard_->faulted(); }

 private:
  void release() noexcept;

  std::string name_;
  UniqueFd fd_;  // kept open: check_intact fstats it
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;
  ProcessIdentity creator_;
  std::unique_ptr<BusFaultGuard> guard_;  // on segments this process did not make
};

}  // namespace hotswap::transport
