//===- BlockManager.cpp - Paged KV cache: block tables, sharing, prefixes -===//
//
// See BlockManager.h. Invariants: a block is in exactly one of free_ (no
// reference, unnamed), evictable_ (no reference, named) or referenced by
// at least one sequence table (refs counts the table entries naming it);
// byHash_ maps each name to the one block holding it.
//
//===----------------------------------------------------------------------===//
#include "kv/BlockManager.h"

#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <string>

namespace kiln::rt::kv {

/// h_{-1} of every hash chain.
static constexpr uint64_t kChainSeed = 0x6b696c6e2d6b7600ull; // "kiln-kv"

BlockManager::BlockManager(int32_t numBlocks, int32_t blockTokens,
                           bool prefixCaching)
    : blockTokens_(std::max<int32_t>(1, blockTokens)),
      prefixCaching_(prefixCaching),
      blocks_(size_t(std::max<int32_t>(1, numBlocks))) {
  // A stack: block 0 is handed out first.
  for (int32_t b = int32_t(blocks_.size()) - 1; b >= 0; --b)
    free_.push_back(b);
}

uint64_t BlockManager::chain(uint64_t prev, const int32_t *tokens) const {
  static_assert(sizeof(int32_t) == 4, "token ids are 32-bit");
  return XXH3_64bits_withSeed(tokens, sizeof(int32_t) * size_t(blockTokens_),
                              prev);
}

std::vector<int32_t> BlockManager::cachedPrefix(const int32_t *tokens,
                                                int64_t count) const {
  std::vector<int32_t> out;
  if (!prefixCaching_ || count < 1)
    return out;
  // Full blocks strictly before the last token: it must be computed.
  const int64_t usable = (count - 1) / blockTokens_;
  uint64_t h = kChainSeed;
  for (int64_t i = 0; i < usable; ++i) {
    h = chain(h, tokens + i * blockTokens_);
    auto it = byHash_.find(h);
    if (it == byHash_.end())
      break;
    out.push_back(it->second);
  }
  return out;
}

int32_t BlockManager::blocksNeeded(const int32_t *tokens, int64_t count) const {
  if (count < 1)
    return 0;
  std::vector<int32_t> cached = cachedPrefix(tokens, count);
  const int64_t total = (count + blockTokens_ - 1) / blockTokens_;
  int64_t need = total - int64_t(cached.size());
  for (int32_t b : cached)
    if (blocks_[size_t(b)].refs == 0)
      ++need; // leaves the evictable list
  return int32_t(std::min<int64_t>(need, std::numeric_limits<int32_t>::max()));
}

int32_t BlockManager::takeBlock() {
  int32_t b = -1;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    b = evictable_.front();
    evictable_.pop_front();
    Block &blk = blocks_[size_t(b)];
    byHash_.erase(blk.hash);
    blk.named = false;
    ++stats_.evictedBlocks;
  } else {
    return -1;
  }
  blocks_[size_t(b)].refs = 1;
  return b;
}

void BlockManager::retain(int32_t block) {
  Block &blk = blocks_[size_t(block)];
  if (blk.refs == 0 && blk.named)
    evictable_.erase(blk.lru);
  ++blk.refs;
}

void BlockManager::drop(int32_t block) {
  Block &blk = blocks_[size_t(block)];
  if (--blk.refs > 0)
    return;
  if (blk.named) {
    blk.lru = evictable_.insert(evictable_.end(), block);
  } else {
    free_.push_back(block);
  }
}

void BlockManager::name(Sequence &seq, int64_t index, int32_t block) {
  const uint64_t prev = index == 0 ? kChainSeed : seq.hashes[size_t(index - 1)];
  const uint64_t h = chain(prev, seq.tokens.data() + index * blockTokens_);
  seq.hashes.push_back(h);
  Block &blk = blocks_[size_t(block)];
  if (!prefixCaching_ || blk.named || byHash_.count(h))
    return; // already named, or another block holds this prefix
  blk.named = true;
  blk.hash = h;
  byHash_.emplace(h, block);
}

Status BlockManager::allocate(SequenceId id, const int32_t *tokens,
                              int64_t count, int64_t *cachedTokens) {
  if (seqs_.count(id))
    return invalidArgument("sequence " + std::to_string(id) +
                           " already holds KV-cache blocks");
  if (count < 1)
    return invalidArgument("a sequence needs at least one prompt token, got " +
                           std::to_string(count));
  const int32_t need = blocksNeeded(tokens, count);
  if (need > numAvailable())
    return outOfRange("the prompt of " + std::to_string(count) +
                      " tokens needs " + std::to_string(need) +
                      " KV-cache blocks, " + std::to_string(numAvailable()) +
                      " available");
  std::vector<int32_t> cached = cachedPrefix(tokens, count);
  if (prefixCaching_) {
    stats_.queriedTokens += (count - 1) / blockTokens_ * blockTokens_;
    stats_.hitTokens += int64_t(cached.size()) * blockTokens_;
  }
  Sequence seq;
  seq.tokens.assign(tokens, tokens + count);
  for (int32_t b : cached) {
    retain(b);
    seq.table.push_back(b);
    seq.hashes.push_back(blocks_[size_t(b)].hash);
  }
  seq.computed = int64_t(cached.size()) * blockTokens_;
  const int64_t total = (count + blockTokens_ - 1) / blockTokens_;
  while (int64_t(seq.table.size()) < total)
    seq.table.push_back(takeBlock()); // cannot fail: counted above
  if (cachedTokens)
    *cachedTokens = seq.computed;
  seqs_.emplace(id, std::move(seq));
  return Status::ok();
}

Status BlockManager::append(SequenceId id, int32_t token, BlockCopy *copy) {
  if (copy)
    *copy = BlockCopy();
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return notFound("no KV-cache blocks for sequence " + std::to_string(id));
  Sequence &seq = it->second;
  const int64_t t = int64_t(seq.tokens.size());
  if (t % blockTokens_ == 0) { // the last block is full (or there is none)
    const int32_t b = takeBlock();
    if (b < 0)
      return outOfRange("no free KV-cache block for sequence " +
                        std::to_string(id));
    seq.table.push_back(b);
  } else if (blocks_[size_t(seq.table.back())].refs > 1) {
    // Shared, partly filled: this sequence writes into a private copy.
    const int32_t b = takeBlock();
    if (b < 0)
      return outOfRange("no free KV-cache block for sequence " +
                        std::to_string(id) + " (copy-on-write)");
    const int32_t shared = seq.table.back();
    drop(shared);
    seq.table.back() = b;
    if (copy)
      *copy = BlockCopy{shared, b};
  }
  seq.tokens.push_back(token);
  return Status::ok();
}

Status BlockManager::commit(SequenceId id, int64_t computedTokens) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return notFound("no KV-cache blocks for sequence " + std::to_string(id));
  Sequence &seq = it->second;
  if (computedTokens < seq.computed ||
      computedTokens > int64_t(seq.tokens.size()))
    return invalidArgument(
        "sequence " + std::to_string(id) + " holds " +
        std::to_string(seq.tokens.size()) + " tokens with " +
        std::to_string(seq.computed) + " computed; cannot mark " +
        std::to_string(computedTokens) + " computed");
  seq.computed = computedTokens;
  for (int64_t i = int64_t(seq.hashes.size());
       (i + 1) * blockTokens_ <= seq.computed; ++i)
    name(seq, i, seq.table[size_t(i)]);
  return Status::ok();
}

Status BlockManager::fork(SequenceId parent, SequenceId child) {
  auto it = seqs_.find(parent);
  if (it == seqs_.end())
    return notFound("no KV-cache blocks for sequence " +
                    std::to_string(parent));
  if (seqs_.count(child))
    return invalidArgument("sequence " + std::to_string(child) +
                           " already holds KV-cache blocks");
  Sequence copy = it->second;
  for (int32_t b : copy.table)
    retain(b);
  seqs_.emplace(child, std::move(copy));
  return Status::ok();
}

Status BlockManager::truncate(SequenceId id, int64_t count) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return notFound("no KV-cache blocks for sequence " + std::to_string(id));
  Sequence &seq = it->second;
  if (count < seq.computed || count > int64_t(seq.tokens.size()))
    return invalidArgument("sequence " + std::to_string(id) + " holds " +
                           std::to_string(seq.tokens.size()) + " tokens with " +
                           std::to_string(seq.computed) +
                           " committed; cannot truncate to " +
                           std::to_string(count));
  seq.tokens.resize(size_t(count));
  const size_t keep = size_t((count + blockTokens_ - 1) / blockTokens_);
  while (seq.table.size() > keep) {
    drop(seq.table.back());
    seq.table.pop_back();
  }
  return Status::ok();
}

void BlockManager::release(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return;
  // Last block first: the prefix's first blocks, shared by most prompts,
  // end up most recently used and are evicted last.
  const std::vector<int32_t> &table = it->second.table;
  for (auto b = table.rbegin(); b != table.rend(); ++b)
    drop(*b);
  seqs_.erase(it);
}

const std::vector<int32_t> &BlockManager::blockTable(SequenceId id) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(id);
  return it == seqs_.end() ? kEmpty : it->second.table;
}

int64_t BlockManager::tokens(SequenceId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : int64_t(it->second.tokens.size());
}

int64_t BlockManager::computedTokens(SequenceId id) const {
  auto it = seqs_.find(id);
  return it == seqs_.end() ? 0 : it->second.computed;
}

} // namespace kiln::rt::kv
