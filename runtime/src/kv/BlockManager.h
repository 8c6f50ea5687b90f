//===- BlockManager.h - Paged KV cache: block tables, sharing, prefixes -*- C++ -*-===//
//
// The bookkeeping of a paged KV cache (PagedAttention: Kwon et al. 2023,
// "Efficient Memory Management for Large Language Model Serving with
// PagedAttention", sections 4.2-4.4). A pool of `numBlocks` physical blocks
// holds `blockTokens` token positions each; every sequence has a block
// table whose entry i is the physical block holding its positions
// [i * blockTokens, (i + 1) * blockTokens). Blocks are reference-counted:
// a forked sequence (parallel sampling, a shared conversation) shares its
// parent's blocks without copying, and the first token appended into a
// shared, partly filled last block gets a private copy of that block
// (copy-on-write: the manager picks the blocks, the caller copies the KV
// rows, BlockCopy).
//
// Prefix caching (vLLM's automatic prefix caching): a block whose
// blockTokens token ids are all known is named by a hash chain,
//   h_0 = H(seed, tokens of block 0),  h_i = H(h_{i-1}, tokens of block i),
// H = XXH3-64 over the previous hash and the little-endian int32 ids, so a
// name covers the whole prefix up to the block's end. A new sequence whose
// prompt starts with named blocks reuses them (a block is named once its
// KV rows are computed, commit); a freed named block is kept, unreferenced,
// and evicted least recently used first when the pool has no free block
// left. Names are 64-bit: two different prefixes collide with probability
// about 2^-64 per pair.
//
// Not thread-safe: one scheduler thread owns a BlockManager. Every failed
// call leaves the manager as it was.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_KV_BLOCKMANAGER_H
#define KILN_RUNTIME_KV_BLOCKMANAGER_H

#include "base/Status.h"

#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace kiln::rt::kv {

/// A sequence's id, chosen by the caller (a request id).
using SequenceId = int64_t;

/// KV rows the caller must copy before writing into `dst`: block `src` was
/// shared and `dst` is the appending sequence's private copy of it.
struct BlockCopy {
  int32_t src = -1, dst = -1;
  bool needed() const { return src >= 0; }
};

/// Prefix-cache counters since construction, in tokens.
struct PrefixCacheStats {
  int64_t queriedTokens = 0; ///< prompt tokens looked up (full blocks only)
  int64_t hitTokens = 0;     ///< of those, found in the cache
  int64_t evictedBlocks = 0; ///< cached blocks reused for other data
};

class BlockManager {
public:
  /// numBlocks >= 1 blocks of blockTokens >= 1 positions (the caller checks;
  /// other values are clamped to 1). `prefixCaching` off: freed blocks
  /// return to the free list at once and prompts never share blocks.
  BlockManager(int32_t numBlocks, int32_t blockTokens, bool prefixCaching);

  int32_t numBlocks() const { return int32_t(blocks_.size()); }
  int32_t blockTokens() const { return blockTokens_; }
  /// Blocks an allocation may take now: free ones plus cached ones no
  /// sequence references (evictable).
  int32_t numAvailable() const {
    return int32_t(free_.size() + evictable_.size());
  }
  const PrefixCacheStats &stats() const { return stats_; }

  /// Blocks a new sequence with this prompt needs now, after reusing its
  /// cached prefix (cached blocks it would take from the evictable list
  /// count, since they stop being available).
  int32_t blocksNeeded(const int32_t *tokens, int64_t count) const;

  /// Registers sequence `id` holding the `count` >= 1 prompt tokens: the
  /// blocks of its longest cached prefix of full blocks are reused, the
  /// rest allocated. `cachedTokens` receives how many leading prompt tokens
  /// already have KV rows (a multiple of blockTokens, at most count - 1, so
  /// that the last prompt token is always computed and yields logits).
  /// Errors: `id` already registered (INVALID_ARGUMENT), count < 1
  /// (INVALID_ARGUMENT), not enough blocks (OUT_OF_RANGE: the caller waits
  /// or preempts).
  Status allocate(SequenceId id, const int32_t *tokens, int64_t count,
                  int64_t *cachedTokens);

  /// Reserves the position of one more token (`token`, a decoded id) of
  /// `id`: a new block when the last one is full, or a private copy of the
  /// last block when it is shared (`copy` then names the rows to copy;
  /// otherwise copy->needed() is false). Errors: unknown `id` (NOT_FOUND),
  /// no block left (OUT_OF_RANGE).
  Status append(SequenceId id, int32_t token, BlockCopy *copy);

  /// Declares that the KV rows of positions [0, computedTokens) of `id` are
  /// written (after the step that computed them): its full blocks among
  /// them are named for the prefix cache. Blocks are never named before
  /// their rows exist, so no prompt can reuse rows still being computed.
  /// Errors: unknown `id` (NOT_FOUND); computedTokens below the count
  /// already declared or above tokens(id) (INVALID_ARGUMENT).
  Status commit(SequenceId id, int64_t computedTokens);

  /// Forgets the positions of `id` from `count` on (speculative decoding's
  /// rejected draft tokens): its tokens are cut to `count` and the blocks
  /// past the last one still needed lose their reference. Errors: unknown
  /// `id` (NOT_FOUND); count below the committed tokens or above tokens(id)
  /// (INVALID_ARGUMENT).
  Status truncate(SequenceId id, int64_t count);

  /// Registers `child` sharing every block of `parent` (same tokens, no
  /// copy). Errors: unknown parent (NOT_FOUND), child exists
  /// (INVALID_ARGUMENT).
  Status fork(SequenceId parent, SequenceId child);

  /// Drops `id` (finished, cancelled or preempted): each of its blocks
  /// loses a reference; one left without references becomes evictable when
  /// it is named (prefix caching), else free. Unknown ids are ignored.
  void release(SequenceId id);

  bool contains(SequenceId id) const { return seqs_.count(id) != 0; }
  /// The physical block of each logical block of `id` (empty if unknown).
  const std::vector<int32_t> &blockTable(SequenceId id) const;
  /// Tokens `id` holds (prompt and appended), 0 if unknown.
  int64_t tokens(SequenceId id) const;
  /// Leading tokens of `id` whose KV rows are written (commit, or found in
  /// the prefix cache), 0 if unknown.
  int64_t computedTokens(SequenceId id) const;
  /// References to `block` (tests and invariant checks).
  int32_t refCount(int32_t block) const { return blocks_[size_t(block)].refs; }
  /// Whether `block` holds a named prefix block (its rows may be reused).
  bool isCached(int32_t block) const { return blocks_[size_t(block)].named; }

private:
  struct Block {
    int32_t refs = 0;
    bool named = false;   ///< holds a full, hashed block of some prefix
    uint64_t hash = 0;    ///< its name when `named`
    std::list<int32_t>::iterator lru; ///< position in evictable_ (refs == 0)
  };
  struct Sequence {
    std::vector<int32_t> table;
    std::vector<int32_t> tokens;  ///< every token id, for naming full blocks
    std::vector<uint64_t> hashes; ///< names of the first full blocks, in order
    int64_t computed = 0;         ///< leading tokens with KV rows written
  };

  /// The name of the block after `prev` holding `tokens[0, blockTokens)`.
  uint64_t chain(uint64_t prev, const int32_t *tokens) const;
  /// Cached blocks for the longest named prefix of the prompt, limited so
  /// that at least the last token is computed.
  std::vector<int32_t> cachedPrefix(const int32_t *tokens, int64_t count) const;
  /// A block with no reference and no name, taken from the free list or,
  /// failing that, by evicting the least recently used cached block; -1 if
  /// none. The result has refs == 1.
  int32_t takeBlock();
  /// One more reference to `block` (leaves the evictable list at 0 -> 1).
  void retain(int32_t block);
  /// One reference less; at 0 the block is kept named (evictable) or freed.
  void drop(int32_t block);
  /// Names `block`, the full block `index` of `seq`, for later prompts.
  void name(Sequence &seq, int64_t index, int32_t block);

  int32_t blockTokens_;
  bool prefixCaching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;       ///< unnamed, unreferenced (a stack)
  std::list<int32_t> evictable_;    ///< named, unreferenced, LRU first
  std::unordered_map<uint64_t, int32_t> byHash_; ///< named block of a hash
  std::unordered_map<SequenceId, Sequence> seqs_;
  PrefixCacheStats stats_;
};

} // namespace kiln::rt::kv

#endif // KILN_RUNTIME_KV_BLOCKMANAGER_H
