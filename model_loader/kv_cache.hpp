// KvCache: one sequence's share of a model's paged KV cache (KvBlockPool): the blocks it holds,
// in position order (its block table), and how many positions are filled. Position p of the
// sequence lives in block blocks()[p / block_size], slot p % block_size. The blocks go back to
// the pool when the cache is cleared or destroyed, so a finished or preempted sequence frees its
// memory for the others at once.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace hotswap::model_loader {

class KvBlockPool;

class KvCache {
 public:
  KvCache() = default;
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // How many positions are filled; a forward step adds its tokens.
  std::int64_t length = 0;
  // Set by a tensor-parallel model on the cache's first step: names it to the other ranks,
  // which keep their heads of it, and tells them to drop those when the cache goes (or is
  // cleared: a cleared cache starts over under a new name).
  std::shared_ptr<const void> peer_tag;

  const std::vector<std::int32_t>& blocks() const { return blocks_; }
  // Positions the held blocks have room for.
  std::int64_t capacity() const;
  // Gives every block back to its pool and forgets the contents and the peer tag.
  void clear();

 private:
  friend class KvBlockPool;
  void release() noexcept;
  std::weak_ptr<KvBlockPool> pool_;  // the pool the blocks came from; none before the first step
  std::int64_t block_size_ = 0;
  std::vector<std::int32_t> blocks_;
};

}  // namespace hotswap::model_loader
