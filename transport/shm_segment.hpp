// ShmSegment: RAII over a POSIX shared-memory segment (shm_open + mmap). The creator makes it
// 0600 and exclusively (O_EXCL), and unlinks it when it goes away, on every exit path; a process
// that only opened it can unlink it too, which is how a worker clears what a dead trainer left.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hotswap::transport {

class ShmSegment {
 public:
  // Creates `name` ("/hotswap-...") with `size` bytes; RuntimeError if it exists or fails.
  static ShmSegment create(const std::string& name, std::size_t size);
  // Opens an existing segment (read-write, or mapped read-only where this side must never write
  // it); RuntimeError naming it when it is not there.
  enum class Access { kReadWrite, kReadOnly };
  static ShmSegment open(const std::string& name, Access access = Access::kReadWrite);
  // Removes the name (the memory lives on while mapped); a missing name is not an error.
  static void unlink(const std::string& name) noexcept;
  // hotswap names its segments "/hotswap-<creator pid>-...": whether that process still runs
  // on this host. False for a name in another form (its creator is unknown).
  static bool creator_alive(const std::string& name);

  ShmSegment() = default;
  ~ShmSegment();
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }
  bool owner() const { return owner_; }

 private:
  void release() noexcept;

  std::string name_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  bool owner_ = false;
};

}  // namespace hotswap::transport
