#include "model_loader/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "protocol/errors.hpp"
#include "transport/posix_check.hpp"
#include "transport/unique_fd.hpp"

namespace hotswap::model_loader {
namespace {

std::uint8_t* map(int fd, std::size_t size, int prot, int flags, const std::string& path) {
  if (size == 0) return nullptr;
  void* p = ::mmap(nullptr, size, prot, flags, fd, 0);
  if (p == MAP_FAILED) transport::throw_posix_error(errno, "map", path);
  return static_cast<std::uint8_t*>(p);
}

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Opens `path` for reading only when it is a regular file. O_NONBLOCK: opening a FIFO for
// reading would otherwise wait for a writer forever, before fstat could refuse it.
transport::UniqueFd open_regular(const std::string& path, struct stat& st) {
  transport::UniqueFd fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY)};
  HOTSWAP_POSIX_CHECK(fd.get(), "open", path);
  HOTSWAP_POSIX_CHECK(::fstat(fd.get(), &st), "stat", path);
  if (!S_ISREG(st.st_mode)) {
    throw protocol::ValueError(path + " is " + file_kind(st.st_mode) +
                               "; hotswap reads only regular files");
  }
  return fd;
}

}  // namespace

std::string read_regular_file(const std::string& path, std::size_t max_bytes) {
  struct stat st {};
  transport::UniqueFd fd = open_regular(path, st);
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    throw protocol::ValueError(path + " is " + std::to_string(st.st_size) +
                               " bytes, over the limit of " + std::to_string(max_bytes) +
                               " for this kind of file");
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    HOTSWAP_POSIX_CHECK(n, "read", path);
    if (n == 0) break;  // it shrank while read: what is there is all there is
    done += static_cast<std::size_t>(n);
  }
  text.resize(done);
  return text;
}

MappedFile MappedFile::open_read_only(const std::string& path) {
  struct stat st {};
  transport::UniqueFd fd = open_regular(path, st);
  auto size = static_cast<std::size_t>(st.st_size);
  std::uint8_t* data = map(fd.get(), size, PROT_READ, MAP_PRIVATE, path);
  return MappedFile(path, std::move(fd), data, size);
}

MappedFile MappedFile::create(const std::string& path, std::size_t size) {
  transport::UniqueFd fd{::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
  HOTSWAP_POSIX_CHECK(fd.get(), "create", path);
  HOTSWAP_POSIX_CHECK(::ftruncate(fd.get(), static_cast<off_t>(size)), "resize", path);
  std::uint8_t* data = map(fd.get(), size, PROT_READ | PROT_WRITE, MAP_SHARED, path);
  return MappedFile(path, std::move(fd), data, size);
}

void MappedFile::sync() {
  if (data_ != nullptr) HOTSWAP_POSIX_CHECK(::msync(data_, size_, MS_SYNC), "flush", path_);
}

void MappedFile::read_at(std::uint64_t offset, std::uint8_t* destination, std::size_t bytes) const {
  std::size_t done = 0;
  while (done < bytes) {
    ssize_t n =
        ::pread(fd_.get(), destination + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    HOTSWAP_POSIX_CHECK(n, "read", path_);
    if (n == 0) {
      throw protocol::ValueError(path_ + " ends at byte " + std::to_string(offset + done) +
                                 ", before byte " + std::to_string(offset + bytes) +
                                 " that its header promises: it was truncated or rewritten "
                                 "while being read");
    }
    done += static_cast<std::size_t>(n);
  }
}

void MappedFile::release() noexcept {
  if (data_ != nullptr) ::munmap(data_, size_);
  fd_.reset();
  data_ = nullptr;
}

MappedFile::~MappedFile() {
  release();
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace hotswap::model_loader
