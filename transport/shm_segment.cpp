#include "transport/shm_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "protocol/errors.hpp"
#include "protocol/shm_info.hpp"
#include "transport/posix_check.hpp"

namespace hotswap::transport {
namespace {

constexpr char kMagic[8] = {'H', 'O', 'T', 'S', 'W', 'A', 'P', '\0'};
constexpr std::uint32_t kVersion = 1;

struct Header {
  char magic[8];
  std::uint32_t version;
  std::uint32_t kind;
  std::uint64_t total_bytes;  // header included: what fstat must say
  std::uint32_t creator_uid;
  std::int32_t creator_pid;
  std::uint64_t creator_start_time;
  std::uint8_t reserved[24];
};
static_assert(sizeof(Header) == ShmSegment::kHeaderBytes);

const char* kind_name(std::uint32_t kind) {
  switch (static_cast<ShmKind>(kind)) {
    case ShmKind::kRingBuffer:
      return "a ring buffer";
    case ShmKind::kWeightArena:
      return "a weight arena";
  }
  return "of an unknown kind";
}

bool has_hotswap_name(const std::string& name) {
  return protocol::is_hotswap_shm_name(name);
}

// The header of an open segment, read with pread (a shrunk segment reads short instead of
// faulting). Empty string when it is a hotswap header of `st`'s size and owner; else what is
// wrong with it.
std::string check_header(int fd, const struct stat& st, Header& header) {
  if (!S_ISREG(st.st_mode)) return "is not a shared-memory object";
  if (st.st_uid != ::geteuid()) {
    return "belongs to uid " + std::to_string(st.st_uid) + ", not to this process's uid " +
           std::to_string(::geteuid()) + " (hotswap opens only its own user's segments)";
  }
  if (static_cast<std::uint64_t>(st.st_size) < ShmSegment::kHeaderBytes ||
      ::pread(fd, &header, sizeof header, 0) != static_cast<ssize_t>(sizeof header)) {
    return "is " + std::to_string(st.st_size) + " bytes, too small to hold a hotswap header";
  }
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0) {
    return "has no hotswap header (it was not made by a hotswap trainer)";
  }
  if (header.version != kVersion) {
    return "has format version " + std::to_string(header.version) + "; this build reads " +
           std::to_string(kVersion);
  }
  if (header.total_bytes != static_cast<std::uint64_t>(st.st_size)) {
    return "is " + std::to_string(st.st_size) + " bytes but its header says " +
           std::to_string(header.total_bytes) + " (it was resized after it was made)";
  }
  if (header.creator_uid != st.st_uid) {
    return "names uid " + std::to_string(header.creator_uid) + " as its creator but belongs to " +
           std::to_string(st.st_uid);
  }
  return {};
}

}  // namespace

ShmSegment ShmSegment::create(const std::string& name, ShmKind kind, std::size_t payload_bytes) {
  if (!has_hotswap_name(name)) {
    throw protocol::ValueError("shared-memory name '" + name + "' must start with " +
                               std::string(kNamePrefix) + " and contain no other '/'");
  }
  const std::size_t size = kHeaderBytes + payload_bytes;
  UniqueFd fd(::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
  HOTSWAP_POSIX_CHECK(fd.get(), "create shared-memory segment", name);
  ShmSegment segment;
  segment.name_ = name;
  segment.owner_ = true;  // from here on, the destructor unlinks it
  segment.size_ = size;
  HOTSWAP_POSIX_CHECK(::ftruncate(fd.get(), static_cast<off_t>(size)),
                      "resize shared-memory segment", name);
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw_posix_error(errno, "map shared-memory segment", name);
  segment.data_ = static_cast<std::uint8_t*>(p);
  segment.fd_ = std::move(fd);
  segment.creator_ = ProcessIdentity::self();
  Header header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kVersion;
  header.kind = static_cast<std::uint32_t>(kind);
  header.total_bytes = size;
  header.creator_uid = ::geteuid();
  header.creator_pid = segment.creator_.pid;
  header.creator_start_time = segment.creator_.start_time;
  std::memcpy(segment.data_, &header, sizeof header);
  return segment;
}

ShmSegment ShmSegment::open(const std::string& name, ShmKind kind, Access access) {
  auto refuse = [&](const std::string& why) {
    return protocol::ValueError("shared-memory segment " + name + " " + why);
  };
  if (!has_hotswap_name(name)) {
    throw protocol::ValueError("'" + name + "' is not a hotswap shared-memory segment name (they " +
                               "start with " + std::string(kNamePrefix) + ")");
  }
  const bool writable = access == Access::kReadWrite;
  // O_NONBLOCK: whatever sits under that name, opening it never waits.
  UniqueFd fd(::shm_open(name.c_str(), (writable ? O_RDWR : O_RDONLY) | O_NONBLOCK | O_CLOEXEC, 0));
  if (fd.get() < 0) throw refuse(std::string("cannot be opened: ") + std::strerror(errno));
  struct stat st {};
  HOTSWAP_POSIX_CHECK(::fstat(fd.get(), &st), "stat shared-memory segment", name);
  Header header{};
  if (auto problem = check_header(fd.get(), st, header); !problem.empty()) throw refuse(problem);
  if (header.kind != static_cast<std::uint32_t>(kind)) {
    throw refuse(std::string("is ") + kind_name(header.kind) + ", not " +
                 kind_name(static_cast<std::uint32_t>(kind)));
  }
  ShmSegment segment;
  segment.name_ = name;
  segment.size_ = static_cast<std::size_t>(st.st_size);
  void* p = ::mmap(nullptr, segment.size_, writable ? PROT_READ | PROT_WRITE : PROT_READ,
                   MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) throw_posix_error(errno, "map shared-memory segment", name);
  segment.data_ = static_cast<std::uint8_t*>(p);
  segment.fd_ = std::move(fd);
  segment.creator_ = {header.creator_pid, header.creator_start_time};
  segment.guard_ = std::make_unique<BusFaultGuard>(segment.data_, segment.size_,
                                                   writable ? PROT_READ | PROT_WRITE : PROT_READ);
  return segment;
}

bool ShmSegment::unlink_if_orphaned(const std::string& name) noexcept {
  if (!has_hotswap_name(name)) return false;
  UniqueFd fd(::shm_open(name.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC, 0));
  if (fd.get() < 0) return false;
  struct stat st {};
  Header header{};
  if (::fstat(fd.get(), &st) != 0 || !check_header(fd.get(), st, header).empty()) return false;
  try {
    if (ProcessIdentity{header.creator_pid, header.creator_start_time}.alive()) return false;
  } catch (...) {
    return false;  // could not tell: leave it
  }
  return ::shm_unlink(name.c_str()) == 0;
}

std::vector<std::string> ShmSegment::remove_orphans() noexcept {
  std::vector<std::string> removed;
  try {
    DIR* dir = ::opendir("/dev/shm");
    if (dir == nullptr) return removed;
    std::vector<std::string> names;
    while (const dirent* entry = ::readdir(dir)) {
      std::string name = std::string("/") + entry->d_name;
      if (name.starts_with(kNamePrefix)) names.push_back(std::move(name));
    }
    ::closedir(dir);
    for (const auto& name : names) {
      if (unlink_if_orphaned(name)) removed.push_back(name);
    }
  } catch (...) {
    // Out of memory while listing: what was removed stays removed, the rest waits.
  }
  return removed;
}

void ShmSegment::check_intact() const {
  struct stat st {};
  if (!fd_.valid() || ::fstat(fd_.get(), &st) != 0) {
    throw protocol::TransferError("shared-memory segment " + name_ + " is no longer readable");
  }
  if (static_cast<std::uint64_t>(st.st_size) < size_) {
    throw protocol::TransferError("shared-memory segment " + name_ + " shrank from " +
                                  std::to_string(size_) + " to " + std::to_string(st.st_size) +
                                  " bytes after the handshake; its trainer truncated it");
  }
  if (faulted()) {
    throw protocol::TransferError("shared-memory segment " + name_ +
                                  " was shrunk while it was being read (its trainer truncated "
                                  "it); what was read is discarded");
  }
}

void ShmSegment::release() noexcept {
  guard_.reset();  // before the range can be mapped again by anyone
  if (data_ != nullptr) ::munmap(data_, size_);
  fd_.reset();
  if (owner_) ::shm_unlink(name_.c_str());
  data_ = nullptr;
  owner_ = false;
}

ShmSegment::~ShmSegment() {
  release();
}

ShmSegment::ShmSegment(ShmSegment&& other) noexcept
    : name_(std::move(other.name_)),
      fd_(std::move(other.fd_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      owner_(std::exchange(other.owner_, false)),
      creator_(other.creator_),
      guard_(std::move(other.guard_)) {}

ShmSegment& ShmSegment::operator=(ShmSegment&& other) noexcept {
  if (this != &other) {
    release();
    name_ = std::move(other.name_);
    fd_ = std::move(other.fd_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
    creator_ = other.creator_;
    guard_ = std::move(other.guard_);
  }
  return *this;
}

}  // namespace hotswap::transport
