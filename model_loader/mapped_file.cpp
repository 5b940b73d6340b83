#include "model_loader/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "transport/posix_check.hpp"

namespace hotswap::model_loader {
namespace {

// Closes a descriptor if a later step of opening fails.
struct FdGuard {
  int fd;
  ~FdGuard() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

std::uint8_t* map(int fd, std::size_t size, int prot, int flags, const std::string& path) {
  if (size == 0) return nullptr;
  void* p = ::mmap(nullptr, size, prot, flags, fd, 0);
  if (p == MAP_FAILED) {
    transport::throw_posix_error(errno, "mmap", path.c_str(), __FILE__, __LINE__);
  }
  return static_cast<std::uint8_t*>(p);
}

}  // namespace

MappedFile MappedFile::open_read_only(const std::string& path) {
  FdGuard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  HOTSWAP_POSIX_CHECK(fd.fd, path);
  struct stat st {};
  HOTSWAP_POSIX_CHECK(::fstat(fd.fd, &st), path);
  auto size = static_cast<std::size_t>(st.st_size);
  std::uint8_t* data = map(fd.fd, size, PROT_READ, MAP_PRIVATE, path);
  return MappedFile(path, fd.release(), data, size);
}

MappedFile MappedFile::create(const std::string& path, std::size_t size) {
  FdGuard fd{::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  HOTSWAP_POSIX_CHECK(fd.fd, path);
  HOTSWAP_POSIX_CHECK(::ftruncate(fd.fd, static_cast<off_t>(size)), path);
  std::uint8_t* data = map(fd.fd, size, PROT_READ | PROT_WRITE, MAP_SHARED, path);
  return MappedFile(path, fd.release(), data, size);
}

void MappedFile::sync() {
  if (data_ != nullptr) HOTSWAP_POSIX_CHECK(::msync(data_, size_, MS_SYNC), path_);
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  if (fd_ >= 0) ::close(fd_);
  data_ = nullptr;
  fd_ = -1;
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace hotswap::model_loader
