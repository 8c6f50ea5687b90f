//===- Scheduler.h - Continuous batching over a paged KV cache ---*- C++ -*-===//
//
// Iteration-level scheduling (Orca: Yu et al. 2022, "Orca: A Distributed
// Serving System for Transformer-Based Generative Models", section 4.2)
// over the paged KV cache of kv::BlockManager (vLLM's scheduler, Kwon et
// al. 2023 section 4.5). Every step the scheduler picks the work of one
// batched model invocation under a token budget:
//
//  1. one decode token for each running sequence whose prompt is done,
//     oldest first; when the cache has no block for one, the most recently
//     admitted running sequence is preempted by recompute (its blocks are
//     released; it waits again at the head of the queue with its prompt and
//     the tokens it generated, which a later prefill recomputes, so its
//     output is unchanged);
//  2. prefill chunks (chunked prefill) of sequences admitted earlier whose
//     prompt is not done, then of waiting requests admitted in arrival
//     order while their blocks (after prefix-cache hits) fit and the batch
//     has room, each chunk at most the budget left.
//
// The caller runs the step (StepPlan: which tokens of which sequence, at
// which positions, with which block table) and reports the sampled token
// of every sequence whose last scheduled token was the end of its known
// tokens (complete()); the scheduler appends it, commits the computed KV
// rows (prefix caching) and retires sequences that reached max_tokens or a
// stop token. Cancellation releases a sequence's blocks at once. Not
// thread-safe: the engine thread owns it.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SERVE_SCHEDULER_H
#define KILN_RUNTIME_SERVE_SCHEDULER_H

#include "kv/BlockManager.h"

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

namespace kiln::rt::serve {

using kv::SequenceId;

/// Limits of one step and of the sequences.
struct SchedulerConfig {
  int64_t maxBatch = 16;       ///< sequences in one step (<= tokenBudget)
  int64_t tokenBudget = 512;   ///< tokens (decode + prefill) in one step
  int64_t maxSeqLen = 2048;    ///< positions per sequence (the context)
};

/// A generation request.
struct Request {
  SequenceId id = 0;
  std::vector<int32_t> prompt;  ///< token ids, at least one
  int64_t maxTokens = 16;       ///< tokens to generate, at least one
  std::vector<int32_t> stopTokens; ///< ids that end the sequence (kept)
};

/// The tokens [start, start + count) of sequence `id` (prompt then
/// generated tokens) at positions [start, start + count), in one step.
struct Chunk {
  SequenceId id = 0;
  int64_t start = 0, count = 0;
  /// The chunk ends at the sequence's last known token: the step samples
  /// its next token, which complete() must receive.
  bool samples = false;
  /// Rows to copy before the step (a shared block the sequence now writes).
  kv::BlockCopy copy;
  /// Speculative decoding: draft tokens after the decode token (count is
  /// 1 + draft.size(); rows [start + 1, start + count) hold them). The
  /// step scores every row; complete() keeps the accepted prefix.
  std::vector<int32_t> draft;
};

/// One step's work.
struct StepPlan {
  std::vector<Chunk> chunks; ///< decodes first, then prefill chunks
  std::vector<SequenceId> preempted; ///< released this step (recompute later)
  int64_t tokens() const {
    int64_t t = 0;
    for (const Chunk &c : chunks)
      t += c.count;
    return t;
  }
};

/// Why a sequence ended (complete()).
enum class FinishReason { Length, Stop, Cancelled };

struct Finished {
  SequenceId id;
  FinishReason reason;
  std::vector<int32_t> output; ///< the generated tokens
};

class Scheduler {
public:
  Scheduler(kv::BlockManager &blocks, SchedulerConfig config);

  /// Queues a request. Errors (INVALID_ARGUMENT, naming the field): id in
  /// use, empty prompt, maxTokens < 1, prompt + maxTokens above maxSeqLen,
  /// a prompt that could never fit the cache.
  Status add(Request request);
  /// Ends `id` now (queued or running): its blocks are released; it is
  /// reported by the next complete() as Cancelled. Unknown ids are ignored.
  void cancel(SequenceId id);

  /// Proposes `draft` tokens to follow the last token of running sequence
  /// `id` in the next schedule() (speculative decoding): its decode chunk
  /// then also holds as many of them as the budget, the context, its
  /// max_tokens and free blocks allow (no sequence is preempted for a
  /// draft). Used once; unknown ids are ignored.
  void setDraft(SequenceId id, std::vector<int32_t> draft);

  /// The next step; empty when nothing can run.
  StepPlan schedule();
  /// After the step of `plan` ran: `sampled[i]` is the token sampled for
  /// the i-th chunk with `samples` set, in order; for a chunk with a draft,
  /// `(*accepted)[i]` are the draft tokens the model kept (a prefix of the
  /// draft; `sampled[i]` follows them), the rest are forgotten (their
  /// blocks released). `emitted[i]` (when given) receives how many of
  /// accepted[i] + sampled[i] were appended: fewer when a stop token or
  /// max_tokens ends the sequence among them. Returns the sequences that
  /// finished (and the cancelled ones).
  std::vector<Finished>
  complete(const StepPlan &plan, const std::vector<int32_t> &sampled,
           const std::vector<std::vector<int32_t>> *accepted = nullptr,
           std::vector<int32_t> *emitted = nullptr);

  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t numWaiting() const { return int64_t(waiting_.size()); }
  int64_t numRunning() const { return int64_t(running_.size()); }
  int64_t numPreemptions() const { return preemptions_; }
  /// The tokens of `id` (prompt and generated), for the step's inputs.
  const std::vector<int32_t> &tokens(SequenceId id) const;

private:
  struct Sequence {
    Request request;
    std::vector<int32_t> tokens; ///< prompt + generated
    int64_t computed = 0;        ///< leading tokens with KV rows
    int64_t generated = 0;
    bool admitted = false;       ///< holds blocks
    std::vector<int32_t> draft;  ///< setDraft's, for the next schedule()
  };

  /// Releases the most recently admitted running sequence other than
  /// `keep` and those already in `plan`, for recompute; false if there is
  /// none.
  bool preemptOne(SequenceId keep, StepPlan &plan);
  /// Releases `id` itself for recompute.
  void preemptSelf(SequenceId id, StepPlan &plan);

  kv::BlockManager &blocks_;
  SchedulerConfig config_;
  std::unordered_map<SequenceId, Sequence> seqs_;
  std::deque<SequenceId> waiting_; ///< arrival order (preempted at the head)
  std::vector<SequenceId> running_; ///< admission order
  std::vector<Finished> cancelled_;
  int64_t preemptions_ = 0;
};

} // namespace kiln::rt::serve

#endif // KILN_RUNTIME_SERVE_SCHEDULER_H
