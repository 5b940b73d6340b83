#include "transport/shm_segment.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "transport/posix_check.hpp"

namespace hotswap::transport {
namespace {

std::uint8_t* map_fd(int fd, std::size_t size, const std::string& name, int protection) {
  void* p = ::mmap(nullptr, size, protection, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int error = errno;
    ::close(fd);
    throw_posix_error(error, "mmap", name.c_str(), __FILE__, __LINE__);
  }
  ::close(fd);  // the mapping keeps the memory; the descriptor is no longer needed
  return static_cast<std::uint8_t*>(p);
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, std::size_t size) {
  int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  HOTSWAP_POSIX_CHECK(fd, name);
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    int error = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    throw_posix_error(error, "ftruncate", name.c_str(), __FILE__, __LINE__);
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.owner_ = true;
  segment.size_ = size;
  try {
    segment.data_ = map_fd(fd, size, name, PROT_READ | PROT_WRITE);
  } catch (...) {
    ::shm_unlink(name.c_str());
    throw;
  }
  return segment;
}

ShmSegment ShmSegment::open(const std::string& name, Access access) {
  const bool writable = access == Access::kReadWrite;
  int fd = ::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC, 0);
  HOTSWAP_POSIX_CHECK(fd, name);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int error = errno;
    ::close(fd);
    throw_posix_error(error, "fstat", name.c_str(), __FILE__, __LINE__);
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.size_ = static_cast<std::size_t>(st.st_size);
  segment.data_ = map_fd(fd, segment.size_, name, writable ? PROT_READ | PROT_WRITE : PROT_READ);
  return segment;
}

void ShmSegment::unlink(const std::string& name) noexcept {
  ::shm_unlink(name.c_str());
}

bool ShmSegment::creator_alive(const std::string& name) {
  static const std::string prefix = "/hotswap-";
  if (!name.starts_with(prefix)) return false;
  const auto end = name.find('-', prefix.size());
  if (end == std::string::npos || end == prefix.size()) return false;
  pid_t pid = 0;
  for (std::size_t i = prefix.size(); i < end; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    pid = pid * 10 + (name[i] - '0');
  }
  // Signal 0 only asks whether the process exists; EPERM means it does, as another user's.
  return pid > 0 && (::kill(pid, 0) == 0 || errno == EPERM);
}

void ShmSegment::release() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
  data_ = nullptr;
  owner_ = false;
}

ShmSegment::~ShmSegment() {
  release();
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::exchange(other.owner_, false)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

}  // namespace hotswap::transport
