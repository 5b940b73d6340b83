// MappedFile: RAII over an open file and its mmap. Read-only mappings back zero-copy tensor
// views of a checkpoint; writable ones let a writer fill a new file in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "transport/unique_fd.hpp"

namespace hotswap::model_loader {

class MappedFile {
 public:
  // Maps an existing regular file read-only (a FIFO, device or directory is a ValueError, and
  // is never waited on). An empty file maps to no memory (data() is null).
  static MappedFile open_read_only(const std::string& path);
  // Creates (or truncates) `path` with `size` bytes and maps it writable and shared.
  static MappedFile create(const std::string& path, std::size_t size);

  MappedFile() = default;  // maps nothing
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::uint8_t* mutable_data() { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

  // Flushes a writable mapping to the file (msync).
  void sync();

  // Reads `bytes` bytes at `offset` of the file into `destination` with pread(), not through the
  // mapping: no page of the mapping is touched. A file shorter than offset + bytes (truncated
  // since it was opened) is a ValueError; an I/O error a PosixError naming the file.
  void read_at(std::uint64_t offset, std::uint8_t* destination, std::size_t bytes) const;

 private:
  MappedFile(std::string path, transport::UniqueFd fd, std::uint8_t* data, std::size_t size)
      : path_(std::move(path)), fd_(std::move(fd)), data_(data), size_(size) {}
  void release() noexcept;

  std::string path_;
  transport::UniqueFd fd_;
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// The whole of a small regular file (config.json, an index): a ValueError for anything that is
// not a regular file or is over `max_bytes`; a PosixError naming the path if it cannot be read.
std::string read_regular_file(const std::string& path, std::size_t max_bytes);

}  // namespace hotswap::model_loader
