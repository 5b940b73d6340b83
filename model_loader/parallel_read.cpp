#include "model_loader/parallel_read.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

#include "model_loader/safetensors_file.hpp"

namespace hotswap::model_loader {
namespace {

// Large enough that a piece costs far more than taking it, small enough that two threads share
// a 100 MB embedding evenly.
constexpr std::size_t kPieceBytes = 4u << 20;

}  // namespace

void read_in_parallel(const std::vector<FileRead>& reads, int threads) {
  std::vector<FileRead> pieces;
  std::size_t total = 0;
  for (const auto& read : reads) {
    total += read.bytes;
    for (std::size_t done = 0; done < read.bytes; done += kPieceBytes) {
      pieces.push_back({read.file, read.offset + done, read.destination + done,
                        std::min(kPieceBytes, read.bytes - done)});
    }
  }
  std::atomic<std::size_t> next{0};
  std::atomic<bool> failed{false};
  std::exception_ptr first_error;
  std::mutex error_mutex;
  auto work = [&] {
    for (std::size_t i; !failed.load(std::memory_order_relaxed) &&
                        (i = next.fetch_add(1, std::memory_order_relaxed)) < pieces.size();) {
      try {
        const auto& p = pieces[i];
        p.file->read_data(p.offset, p.destination, p.bytes);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!first_error) first_error = std::current_exception();
        failed = true;
      }
    }
  };
  // A helper per piece of work at most: a small checkpoint (a few MB, a control round's) is read
  // on the calling thread alone, without paying for starting threads.
  const std::size_t helpers = std::min<std::size_t>(
      static_cast<std::size_t>(std::max(threads, 1)) - 1, total / kPieceBytes);
  std::vector<std::jthread> pool;
  pool.reserve(helpers);
  for (std::size_t t = 0; t < helpers; ++t)
    pool.emplace_back(work);
  work();
  pool.clear();  // joins
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace hotswap::model_loader
