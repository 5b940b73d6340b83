// Reading checkpoint bytes straight into their runtime storage, on every core.
//
// Loading a checkpoint used to map each file, wrap each tensor in a view of the mapping and let
// libtorch copy it: every destination page faulted in 4 KiB at a time and the copy ran on one
// thread per tensor, so a load ran at a third of a plain read() of the same files. pread() into
// the destination, split into pieces spread over the cores, costs what the read costs; the
// destination's page faults are what ParameterStore's huge-page advice takes care of.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hotswap::model_loader {

class SafetensorsFile;

// `bytes` bytes at `offset` into `file`'s tensor data (offsets as in its header) → `destination`.
struct FileRead {
  const SafetensorsFile* file = nullptr;
  std::uint64_t offset = 0;
  std::uint8_t* destination = nullptr;
  std::size_t bytes = 0;
};

// Performs every read, on up to `threads` threads (at least one), in pieces of a few MiB so that
// one large tensor is shared between threads too. Every read is attempted only while all before
// have succeeded; the first failure is rethrown (a PosixError naming the file, or a ValueError
// for a file shorter than its header says) once all threads have stopped.
void read_in_parallel(const std::vector<FileRead>& reads, int threads);

}  // namespace hotswap::model_loader
