#include "model_loader/kv_cache.hpp"

#include <utility>

#include "model_loader/kv_block_pool.hpp"

namespace hotswap::model_loader {

KvCache::~KvCache() {
  release();
}

KvCache::KvCache(KvCache&& other) noexcept
    : length(std::exchange(other.length, 0)),
      peer_tag(std::move(other.peer_tag)),
      pool_(std::move(other.pool_)),
      block_size_(other.block_size_),
      blocks_(std::move(other.blocks_)) {
  other.blocks_.clear();
}

KvCache& KvCache::operator=(KvCache&& other) noexcept {
  if (this != &other) {
    release();
    length = std::exchange(other.length, 0);
    peer_tag = std::move(other.peer_tag);
    pool_ = std::move(other.pool_);
    block_size_ = other.block_size_;
    blocks_ = std::move(other.blocks_);
    other.blocks_.clear();
  }
  return *this;
}

std::int64_t KvCache::capacity() const {
  return static_cast<std::int64_t>(blocks_.size()) * block_size_;
}

void KvCache::clear() {
  release();
  length = 0;
  peer_tag.reset();
}

void KvCache::release() noexcept {
  if (blocks_.empty()) return;
  if (auto pool = pool_.lock()) pool->give_back(blocks_);
  blocks_.clear();
}

}  // namespace hotswap::model_loader
