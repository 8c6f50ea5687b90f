//===- Scheduler.cpp - Continuous batching over a paged KV cache ----------===//
//
// See Scheduler.h. A sequence is waiting (no blocks) or running (admitted:
// blocks for every known token). Running sequences have
// tokens.size() - computed >= 1 tokens to compute: one (the last sampled
// token) in decode, more while their prompt (or the recompute of a
// preempted sequence) is prefilled chunk by chunk.
//
//===----------------------------------------------------------------------===//
#include "serve/Scheduler.h"

#include <algorithm>
#include <string>

namespace kiln::rt::serve {

Scheduler::Scheduler(kv::BlockManager &blocks, SchedulerConfig config)
    : blocks_(blocks), config_(config) {
  config_.tokenBudget = std::max<int64_t>(1, config_.tokenBudget);
  // Every running sequence decodes in every step.
  config_.maxBatch =
      std::clamp<int64_t>(config_.maxBatch, 1, config_.tokenBudget);
}

Status Scheduler::add(Request request) {
  const std::string who = "request " + std::to_string(request.id);
  if (seqs_.count(request.id))
    return invalidArgument(who + ": the id is in use");
  if (request.prompt.empty())
    return invalidArgument(who + ": the prompt has no tokens");
  if (request.maxTokens < 1)
    return invalidArgument(who + ": max_tokens must be at least 1, got " +
                           std::to_string(request.maxTokens));
  const int64_t total = int64_t(request.prompt.size()) + request.maxTokens;
  if (total > config_.maxSeqLen)
    return invalidArgument(
        who + ": " + std::to_string(request.prompt.size()) +
        " prompt tokens + max_tokens " + std::to_string(request.maxTokens) +
        " exceed the context of " + std::to_string(config_.maxSeqLen) +
        " tokens");
  const int64_t B = blocks_.blockTokens();
  if ((total + B - 1) / B > blocks_.numBlocks())
    return invalidArgument(who + ": " + std::to_string(total) +
                           " tokens need more KV-cache blocks than the " +
                           std::to_string(blocks_.numBlocks()) +
                           " of the whole cache");
  Sequence seq;
  seq.tokens = request.prompt;
  seq.request = std::move(request);
  const SequenceId id = seq.request.id;
  seqs_.emplace(id, std::move(seq));
  waiting_.push_back(id);
  return Status::ok();
}

void Scheduler::cancel(SequenceId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end())
    return;
  Sequence &seq = it->second;
  if (seq.admitted) {
    blocks_.release(id);
    running_.erase(std::find(running_.begin(), running_.end(), id));
  } else {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), id));
  }
  cancelled_.push_back(
      Finished{id, FinishReason::Cancelled,
               std::vector<int32_t>(seq.tokens.end() - seq.generated,
                                    seq.tokens.end())});
  seqs_.erase(it);
}

bool Scheduler::preemptOne(SequenceId keep, StepPlan &plan) {
  for (auto it = running_.rbegin(); it != running_.rend(); ++it) {
    if (*it == keep ||
        std::any_of(plan.chunks.begin(), plan.chunks.end(),
                    [&](const Chunk &c) { return c.id == *it; }))
      continue; // already in this step
    const SequenceId victim = *it;
    Sequence &seq = seqs_.at(victim);
    blocks_.release(victim);
    seq.admitted = false;
    seq.computed = 0; // recomputed by a later prefill (prefix cache helps)
    running_.erase(std::next(it).base());
    waiting_.push_front(victim);
    plan.preempted.push_back(victim);
    ++preemptions_;
    return true;
  }
  return false;
}

void Scheduler::preemptSelf(SequenceId id, StepPlan &plan) {
  Sequence &seq = seqs_.at(id);
  blocks_.release(id);
  seq.admitted = false;
  seq.computed = 0;
  running_.erase(std::find(running_.begin(), running_.end(), id));
  waiting_.push_front(id);
  plan.preempted.push_back(id);
  ++preemptions_;
}

StepPlan Scheduler::schedule() {
  StepPlan plan;
  int64_t budget = config_.tokenBudget;
  // 1. Decodes, oldest first: reserve the position of the last token.
  const std::vector<SequenceId> snapshot = running_;
  for (SequenceId id : snapshot) {
    if (budget == 0)
      break;
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second.admitted)
      continue; // preempted earlier in this loop
    Sequence &seq = it->second;
    const int64_t pending = int64_t(seq.tokens.size()) - seq.computed;
    if (pending != 1 || blocks_.tokens(id) == int64_t(seq.tokens.size()))
      continue; // prefilling (handled below)
    kv::BlockCopy copy;
    Status s = blocks_.append(id, seq.tokens.back(), &copy);
    while (s.code() == KILN_RT_OUT_OF_RANGE && preemptOne(id, plan))
      s = blocks_.append(id, seq.tokens.back(), &copy);
    if (!s.isOk()) { // nothing else to preempt: this one waits
      preemptSelf(id, plan);
      continue;
    }
    Chunk c;
    c.id = id;
    c.start = seq.computed;
    c.count = 1;
    c.samples = true;
    c.copy = copy;
    --budget;
    // Draft tokens: the positions after the decode token, while the
    // budget, the context, max_tokens (every kept draft token is output,
    // and the step adds one more) and free blocks allow.
    std::vector<int32_t> draft = std::move(seq.draft);
    seq.draft.clear();
    const int64_t room = std::min<int64_t>(
        {budget, config_.maxSeqLen - int64_t(seq.tokens.size()),
         seq.request.maxTokens - seq.generated - 1});
    if (int64_t(draft.size()) > room)
      draft.resize(size_t(std::max<int64_t>(room, 0)));
    size_t kept = 0;
    for (; kept < draft.size(); ++kept) {
      kv::BlockCopy more;
      if (!blocks_.append(id, draft[kept], &more).isOk())
        break;
      if (more.needed()) { // never after the decode token's append; undo
        (void)blocks_.truncate(id, blocks_.tokens(id) - 1);
        break;
      }
    }
    draft.resize(kept);
    c.count += int64_t(kept);
    budget -= int64_t(kept);
    c.draft = std::move(draft);
    plan.chunks.push_back(std::move(c));
  }
  // 2. Prefill chunks of admitted sequences, then admissions.
  auto prefillChunk = [&](SequenceId id, Sequence &seq) {
    const int64_t pending = int64_t(seq.tokens.size()) - seq.computed;
    Chunk c;
    c.id = id;
    c.start = seq.computed;
    c.count = std::min(pending, budget);
    c.samples = c.start + c.count == int64_t(seq.tokens.size());
    plan.chunks.push_back(c);
    budget -= c.count;
  };
  for (SequenceId id : running_) {
    if (budget == 0)
      break;
    Sequence &seq = seqs_.at(id);
    if (blocks_.tokens(id) == int64_t(seq.tokens.size()) &&
        int64_t(seq.tokens.size()) - seq.computed >= 1 &&
        std::none_of(plan.chunks.begin(), plan.chunks.end(),
                     [&](const Chunk &c) { return c.id == id; }))
      prefillChunk(id, seq);
  }
  while (budget > 0 && !waiting_.empty() &&
         int64_t(running_.size()) < config_.maxBatch) {
    const SequenceId id = waiting_.front();
    Sequence &seq = seqs_.at(id);
    const int64_t count = int64_t(seq.tokens.size());
    if (blocks_.blocksNeeded(seq.tokens.data(), count) >
        blocks_.numAvailable())
      break; // first come, first served: no overtaking
    int64_t cached = 0;
    if (!blocks_.allocate(id, seq.tokens.data(), count, &cached).isOk())
      break;
    waiting_.pop_front();
    seq.admitted = true;
    seq.computed = cached;
    running_.push_back(id);
    prefillChunk(id, seq);
  }
  // Drafts are for this step only.
  for (SequenceId id : running_)
    seqs_.at(id).draft.clear();
  return plan;
}

void Scheduler::setDraft(SequenceId id, std::vector<int32_t> draft) {
  auto it = seqs_.find(id);
  if (it != seqs_.end() && it->second.admitted)
    it->second.draft = std::move(draft);
}

std::vector<Finished>
Scheduler::complete(const StepPlan &plan, const std::vector<int32_t> &sampled,
                    const std::vector<std::vector<int32_t>> *accepted,
                    std::vector<int32_t> *emitted) {
  std::vector<Finished> done = std::move(cancelled_);
  cancelled_.clear();
  if (emitted)
    emitted->clear();
  size_t next = 0;
  for (const Chunk &c : plan.chunks) {
    const size_t index = next;
    const int32_t token =
        c.samples && next < sampled.size() ? sampled[next] : -1;
    if (c.samples) {
      ++next;
      if (emitted)
        emitted->push_back(0);
    }
    auto it = seqs_.find(c.id);
    if (it == seqs_.end() || !it->second.admitted)
      continue; // cancelled after schedule()
    Sequence &seq = it->second;
    // The draft tokens kept (a prefix of c.draft): their rows and the
    // decode token's are computed; the rest are forgotten.
    std::vector<int32_t> out;
    if (c.samples && !c.draft.empty() && accepted && index < accepted->size())
      out = (*accepted)[index];
    if (out.size() > c.draft.size())
      out.resize(c.draft.size());
    if (!c.draft.empty()) {
      seq.computed = c.start + 1 + int64_t(out.size());
      (void)blocks_.truncate(c.id, seq.computed);
    } else {
      seq.computed = c.start + c.count;
    }
    (void)blocks_.commit(c.id, seq.computed); // rows written: name blocks
    if (!c.samples)
      continue;
    out.push_back(token);
    const Request &r = seq.request;
    bool stop = false;
    int32_t appended = 0;
    for (int32_t t : out) {
      seq.tokens.push_back(t);
      ++seq.generated;
      ++appended;
      stop = std::find(r.stopTokens.begin(), r.stopTokens.end(), t) !=
             r.stopTokens.end();
      if (stop || seq.generated >= r.maxTokens)
        break;
    }
    if (emitted)
      emitted->back() = appended;
    if (!stop && seq.generated < r.maxTokens) {
      // Accepted draft tokens past a stop never happen here (the loop
      // ends the sequence); the KV rows of the kept tokens but the last
      // are computed, the last is the next decode token.
      seq.computed = int64_t(seq.tokens.size()) - 1;
      continue;
    }
    done.push_back(Finished{
        c.id, stop ? FinishReason::Stop : FinishReason::Length,
        std::vector<int32_t>(seq.tokens.end() - seq.generated,
                             seq.tokens.end())});
    blocks_.release(c.id);
    running_.erase(std::find(running_.begin(), running_.end(), c.id));
    seqs_.erase(it);
  }
  return done;
}

const std::vector<int32_t> &Scheduler::tokens(SequenceId id) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(id);
  return it == seqs_.end() ? kEmpty : it->second.tokens;
}

} // namespace kiln::rt::serve
