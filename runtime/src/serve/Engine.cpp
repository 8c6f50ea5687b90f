//===- Engine.cpp - Serving engine: batched steps over a paged cache -------===//
//
// See Engine.h and api.h ("serving engine").
//
//===----------------------------------------------------------------------===//
#include "serve/Engine.h"

#include <chrono>

#include "base/FiniteLogits.h"

#include "artifact/Artifact.h"
#include "comm/Comm.h"
#include "comm/ParallelExecutor.h"
#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"
#include "serve/DeviceStepper.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <set>
#include <string>

namespace kiln::rt::serve {

namespace {
constexpr int64_t kDefaultBlockTokens = 16;
constexpr int64_t kDefaultMaxBatch = 16;
constexpr int64_t kDefaultMaxQueue = 256;

uint64_t physicalMemory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}
} // namespace

int64_t kvBlockBytes(int64_t layers, int64_t kvHeads, int64_t headDim,
                     int64_t elemBytes, bool quantized, int64_t blockTokens) {
  const int64_t row = kvHeads * headDim * elemBytes + (quantized ? kvHeads * 4 : 0);
  return layers * 2 * row * blockTokens;
}

/// log softmax(row)[token] = row[token] - max - log(sum_j exp(row[j] -
/// max)), in double: the token's natural-log probability under the raw
/// logits (finite, checked by the caller).
static float logProbability(const float *row, int64_t vocab, int32_t token) {
  float mx = row[0];
  for (int64_t j = 1; j < vocab; ++j)
    mx = std::max(mx, row[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < vocab; ++j)
    sum += std::exp(double(row[j]) - double(mx));
  return float(double(row[token]) - double(mx) - std::log(sum));
}

Status Engine::create(const Artifact &artifact,
                      const kiln_rt_engine_options_t &options,
                      std::unique_ptr<Engine> &out) {
  const Manifest &m = artifact.manifest();
  const std::string &dir = artifact.dir();
  const bool cuda = artifact.target() == Target::Cuda;
  if (!artifact.hasStep() || (!cuda && !artifact.step()) ||
      (cuda && !artifact.cudaBackend()))
    return unimplemented(
        dir + ": has no batched step entry point "
              "(runtime.entry_points.step); recompile it with kiln-compile "
              "(models with scaled RoPE have none yet)");
  auto field = [&](const char *name, int64_t value, int64_t lo, int64_t hi) {
    return invalidArgument("engine option " + std::string(name) + " is " +
                           std::to_string(value) + ", expected " +
                           std::to_string(lo) + ".." + std::to_string(hi));
  };
  std::unique_ptr<Engine> e(new Engine(artifact));
  e->options_ = options;
  e->vocab_ = m.vocabSize;
  e->layers_ = m.kvLayers;
  e->kvHeads_ = m.kvHeads;
  e->headDim_ = m.kvHeadDim;

  e->blockTokens_ = options.block_tokens ? options.block_tokens : kDefaultBlockTokens;
  if (e->blockTokens_ < 1 || e->blockTokens_ > 1024)
    return field("block_tokens", e->blockTokens_, 1, 1024);
  int64_t maxBatch = options.max_batch ? options.max_batch : kDefaultMaxBatch;
  if (maxBatch < 1 || maxBatch > 4096)
    return field("max_batch", maxBatch, 1, 4096);
  const int64_t planTokens = artifact.stepMaxTokens();
  int64_t budget = options.max_step_tokens ? options.max_step_tokens : planTokens;
  if (budget < 1 || budget > planTokens)
    return field("max_step_tokens", budget, 1, planTokens);
  maxBatch = std::min(maxBatch, budget);
  e->options_.max_batch = int32_t(maxBatch);
  const int64_t maxQueue = options.max_queue ? options.max_queue : kDefaultMaxQueue;
  if (maxQueue < 1 || maxQueue > (1 << 20))
    return field("max_queue", maxQueue, 1, 1 << 20);
  e->options_.max_queue = int32_t(maxQueue);
  e->context_ = options.context_length ? options.context_length
                                       : artifact.contextLength();
  if (e->context_ < 2 || e->context_ > artifact.contextLength())
    return field("context_length", e->context_, 2, artifact.contextLength());
  if (options.threads < 0 || options.threads > 4096)
    return field("threads", options.threads, 0, 4096);
  if (options.pp_micro_batches < 0 || options.pp_micro_batches > 1024)
    return field("pp_micro_batches", options.pp_micro_batches, 0, 1024);
  e->microBatches_ = options.pp_micro_batches;
  constexpr uint32_t kKnownFlags =
      KILN_RT_ENGINE_NO_PREFIX_CACHE | KILN_RT_ENGINE_BATCH_INVARIANT;
  if (options.flags & ~kKnownFlags)
    return invalidArgument("engine option flags has unknown bits " +
                           std::to_string(options.flags & ~kKnownFlags) +
                           " (known: KILN_RT_ENGINE_NO_PREFIX_CACHE = 1, "
                           "KILN_RT_ENGINE_BATCH_INVARIANT = 2)");

  // The pool: the KV format the compiler planned (manifest kv_cache.dtype).
  const PoolFormat poolFmt = poolFormat(m.kvDtype);
  const int64_t elemBytes = poolFmt.elemBytes;
  const bool quantized = poolFmt.quantized();
  const int64_t blockBytes = kvBlockBytes(e->layers_, e->kvHeads_, e->headDim_,
                                          elemBytes, quantized, e->blockTokens_);
  const int64_t blocksPerSeq = (e->context_ + e->blockTokens_ - 1) / e->blockTokens_;
  uint64_t bytes = options.kv_cache_bytes;
  if (!bytes) {
    const double fraction = options.kv_cache_fraction;
    if (!(fraction >= 0.0) || fraction > 1.0)
      return invalidArgument("engine option kv_cache_fraction is " +
                             std::to_string(fraction) +
                             ", expected a fraction of memory in (0, 1]");
    // A fraction of the memory the pool lives in: the device's for a
    // cuda artifact (vLLM's --gpu-memory-utilization), the host's else.
    const uint64_t phys = cuda ? artifact.cudaBackend()->deviceMemory()
                               : physicalMemory();
    if (fraction > 0.0) {
      bytes = uint64_t(double(phys) * fraction);
    } else {
      bytes = std::min<uint64_t>(uint64_t(double(phys) * 0.1),
                                 uint64_t(maxBatch * blocksPerSeq) *
                                     uint64_t(blockBytes));
      bytes = std::max<uint64_t>(bytes, uint64_t(blocksPerSeq * blockBytes));
    }
  }
  const uint64_t blocks = bytes / uint64_t(blockBytes);
  if (blocks < uint64_t(blocksPerSeq))
    return resourceExhausted(
        dir + ": a KV cache of " + std::to_string(bytes) + " bytes holds " +
        std::to_string(blocks) + " blocks of " +
        std::to_string(e->blockTokens_) + " positions (" +
        std::to_string(blockBytes) +
        " bytes each); one sequence of the context (" +
        std::to_string(e->context_) + " positions) needs " +
        std::to_string(blocksPerSeq) + " (" +
        std::to_string(blocksPerSeq * blockBytes) +
        " bytes): raise the KV-cache size or lower the context length");
  e->numBlocks_ = int64_t(std::min<uint64_t>(blocks, INT32_MAX / 2));

  StepLimits limits;
  limits.maxSeqs = int32_t(maxBatch);
  limits.maxTokens = int32_t(budget);
  limits.maxBlocks = int32_t(blocksPerSeq);
  if (cuda) {
    KILN_RT_RETURN_IF_ERROR(createDeviceStepper(
        artifact, e->blockTokens_, e->numBlocks_, limits, e->cudaStepper_));
  } else {
    KILN_RT_RETURN_IF_ERROR(CpuStepper::create(artifact, e->blockTokens_,
                                               e->numBlocks_, e->cpuStepper_));
  }
  e->logits_.resize(size_t(maxBatch) * size_t(e->vocab_));

  e->blocks_ = std::make_unique<kv::BlockManager>(
      int32_t(e->numBlocks_), int32_t(e->blockTokens_),
      !(options.flags & KILN_RT_ENGINE_NO_PREFIX_CACHE));
  SchedulerConfig config;
  config.maxBatch = maxBatch;
  config.tokenBudget = budget;
  config.maxSeqLen = e->context_;
  e->scheduler_ = std::make_unique<Scheduler>(*e->blocks_, config);
  e->stats_.kv_blocks_total = e->numBlocks_;
  e->stats_.block_tokens = e->blockTokens_;
  e->stats_.context_length = e->context_;
  if (options.flags & KILN_RT_ENGINE_BATCH_INVARIANT) {
    cpu::acquireBatchInvariantKernels();
    e->batchInvariant_ = true;
  }
  // Rank 0 of a tensor-parallel group: every rank allocates the same pool
  // geometry, addressed by rank 0's block tables.
  if (Communicator *group = artifact.group())
    e->groupId_ = sendEngineCreate(*group, e->blockTokens_, e->numBlocks_,
                                   limits, e->batchInvariant_);
  Engine *raw = e.get();
  e->thread_ = std::thread([raw] { raw->run(); });
  out = std::move(e);
  return Status::ok();
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable())
    thread_.join();
  // Rank 0 of a tensor-parallel group: the followers drop their pools.
  if (Communicator *group = artifact_.group(); group && groupId_ != 0)
    sendEngineRelease(*group, groupId_);
  if (batchInvariant_)
    cpu::releaseBatchInvariantKernels();
}

Status Engine::submit(const int32_t *prompt, int64_t n,
                      const kiln_rt_request_params_t &params,
                      kiln_rt_engine_callback_fn callback, void *user,
                      uint64_t &outId,
                      const kiln_rt_speculative_params_t &spec) {
  if (spec.mode != KILN_RT_SPECULATIVE_OFF) {
    if (spec.mode != KILN_RT_SPECULATIVE_NGRAM &&
        spec.mode != KILN_RT_SPECULATIVE_SUFFIX)
      return invalidArgument("speculative mode " + std::to_string(spec.mode) +
                             " is not one of off (0), ngram (1), suffix (2)");
    if (spec.draft_max < 1 || spec.draft_max > 32)
      return invalidArgument("speculative draft_max must be in [1, 32], got " +
                             std::to_string(spec.draft_max));
    if (cudaStepper_ || artifact_.group())
      return unimplemented("speculative decoding in the engine runs on "
                           "single-process cpu artifacts so far (the CUDA "
                           "and tensor / pipeline parallel steps score no "
                           "draft rows yet)");
  }
  if (!callback)
    return invalidArgument("kiln_rt_engine_submit: null callback");
  if (n < 1 || !prompt)
    return invalidArgument("the prompt has no tokens");
  for (int64_t i = 0; i < n; ++i)
    if (prompt[i] < 0 || prompt[i] >= vocab_)
      return invalidArgument("prompt token " + std::to_string(i) + " is id " +
                             std::to_string(prompt[i]) +
                             ", outside the vocabulary [0, " +
                             std::to_string(vocab_) + ")");
  if (params.max_tokens < 1)
    return invalidArgument("max_tokens must be at least 1, got " +
                           std::to_string(params.max_tokens));
  if (n + int64_t(params.max_tokens) > context_)
    return outOfRange(std::to_string(n) + " prompt tokens + max_tokens " +
                      std::to_string(params.max_tokens) +
                      " exceed the context of " + std::to_string(context_) +
                      " tokens");
  const kiln_rt_sampler_params_t &s = params.sampling;
  if (!(s.temperature >= 0.0f))
    return invalidArgument("temperature must be >= 0, got " +
                           std::to_string(s.temperature));
  if (s.top_k < 0)
    return invalidArgument("top_k must be >= 0, got " + std::to_string(s.top_k));
  if (params.n_stop_ids < 0 || (params.n_stop_ids > 0 && !params.stop_ids))
    return invalidArgument("stop_ids: " + std::to_string(params.n_stop_ids) +
                           " ids without an array");
  Pending p;
  p.request.prompt.assign(prompt, prompt + n);
  p.request.maxTokens = params.max_tokens;
  p.request.stopTokens.assign(params.stop_ids, params.stop_ids + params.n_stop_ids);
  p.sampling = s;
  p.callback = callback;
  p.user = user;
  p.spec = spec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_)
      return internalError("the engine stopped after a failed step");
    if (stopping_)
      return internalError("the engine is shutting down");
    // Requests not yet running count as waiting, less the batch slots
    // free at the last step (a burst on an idle engine is admitted, not
    // refused before the engine thread has picked it up).
    const int64_t freeSlots = std::max<int64_t>(
        0, int64_t(options_.max_batch) - stats_.num_running);
    if (queued_ >= int64_t(options_.max_queue) + freeSlots)
      return resourceExhausted("the request queue is full (" +
                               std::to_string(options_.max_queue) +
                               " waiting requests)");
    p.request.id = kv::SequenceId(nextId_++);
    outId = uint64_t(p.request.id);
    ++queued_;
    incoming_.push_back(std::move(p));
  }
  wake_.notify_all();
  return Status::ok();
}

void Engine::cancel(uint64_t id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    cancels_.push_back(id);
  }
  wake_.notify_all();
}

kiln_rt_engine_stats_t Engine::stats() {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_rt_engine_stats_t s = stats_;
  s.num_waiting += int64_t(incoming_.size());
  return s;
}

void Engine::finish(uint64_t id, kiln_rt_finish_reason_t reason) {
  auto it = live_.find(id);
  if (it == live_.end())
    return;
  Live live = std::move(it->second);
  live_.erase(it);
  live.callback(live.user, id, -1, 0.0f, reason);
}

Status Engine::step(const StepPlan &plan, std::vector<int32_t> &sampled,
                    std::vector<float> &logprobs,
                    std::vector<std::pair<uint64_t, std::string>> &bad) {
  const size_t S = plan.chunks.size();
  const int64_t T = plan.tokens();
  size_t maxBlocks = 1;
  for (const Chunk &c : plan.chunks)
    maxBlocks = std::max(maxBlocks, blocks_->blockTable(c.id).size());
  rowStart_.assign(S, 0);
  rowCount_.assign(S, 0);
  pos_.assign(S, 0);
  tables_.assign(S * maxBlocks, 0);
  tokens_.resize(size_t(T));
  positions_.resize(size_t(T));
  int64_t row = 0;
  copySrc_.clear();
  copyDst_.clear();
  for (size_t s = 0; s < S; ++s) {
    const Chunk &c = plan.chunks[s];
    // Copy-on-write: the rows of a shared block this sequence now writes,
    // copied by the stepper before the step.
    if (c.copy.needed()) {
      copySrc_.push_back(int32_t(c.copy.src));
      copyDst_.push_back(int32_t(c.copy.dst));
    }
    const std::vector<int32_t> &ids = scheduler_->tokens(c.id);
    const std::vector<int32_t> &table = blocks_->blockTable(c.id);
    rowStart_[s] = int32_t(row);
    rowCount_[s] = int32_t(c.count);
    pos_[s] = int32_t(c.start);
    std::copy(table.begin(), table.end(), tables_.begin() + s * maxBlocks);
    // A decode chunk with a draft: the decode token, then the draft.
    const int64_t known = c.count - int64_t(c.draft.size());
    for (int64_t i = 0; i < c.count; ++i, ++row) {
      tokens_[size_t(row)] = i < known ? ids[size_t(c.start + i)]
                                       : c.draft[size_t(i - known)];
      positions_[size_t(row)] = int32_t(c.start + i);
    }
  }
  // Logit rows: every row of a chunk with a draft (speculative verify),
  // one (the last) for the others.
  bool anyDraft = false;
  logitCount_.assign(S, 1);
  int64_t logitRows = 0;
  for (size_t s = 0; s < S; ++s) {
    if (!plan.chunks[s].draft.empty()) {
      logitCount_[s] = int32_t(1 + plan.chunks[s].draft.size());
      anyDraft = true;
    }
    logitRows += logitCount_[s];
  }
  if (logits_.size() < size_t(logitRows) * size_t(vocab_))
    logits_.resize(size_t(logitRows) * size_t(vocab_));
  StepArrays arrays;
  arrays.numSeqs = int32_t(S);
  arrays.numTokens = int32_t(T);
  arrays.maxBlocks = int32_t(maxBlocks);
  arrays.numCopies = int32_t(copySrc_.size());
  arrays.rowStart = rowStart_.data();
  arrays.rowCount = rowCount_.data();
  arrays.pos = pos_.data();
  arrays.blockTables = tables_.data();
  arrays.tokens = tokens_.data();
  arrays.positions = positions_.data();
  arrays.copySrc = copySrc_.data();
  arrays.copyDst = copyDst_.data();
  if (anyDraft) { // only single-process cpu engines (submit refuses others)
    arrays.logitCount = logitCount_.data();
    arrays.numLogitRows = int32_t(logitRows);
  }
  // One micro-batch (or the whole step) on this rank's stepper.
  auto runOn = [&](const StepArrays &part, float *rows,
                   Communicator *group) -> Status {
    if (cudaStepper_)
      return runDeviceStep(*cudaStepper_, part, rows, vocab_);
    cpuStepper_->run(part, rows, group);
    return Status::ok();
  };
  if (Communicator *group = artifact_.group()) {
    // Every rank runs the step on its shard; the all-reduces inside make
    // the logits whole, so rank 0 samples from its own.
    // Pipeline parallelism: the step runs as micro-batches on every rank
    // (stage 0 starts micro-batch k + 1 while stage 1 runs k), and the
    // last stage sends the step's logits once it has run them all
    // (ParallelExecutor.h).
    std::lock_guard<std::mutex> lock(group->stepMutex());
    // By default a step that prefills runs as one micro-batch per stage
    // (its GEMMs are compute-bound: splitting its rows costs nothing and
    // the stages overlap); a decode-only step runs whole (memory-bound:
    // every micro-batch reads the stage's weights again, which the
    // overlap does not repay; docs/parallelism.md).
    int32_t parts = 1;
    if (group->ppSize() > 1)
      parts = microBatches_ > 0 ? microBatches_
              : arrays.numTokens > arrays.numSeqs ? group->ppSize()
                                                  : 1;
    parts = std::min<int32_t>(parts, arrays.numSeqs);
    sendStep(*group, groupId_, arrays, parts);
    for (const serve::MicroBatch &m : serve::splitStep(arrays, parts)) {
      Status ran = runOn(m.arrays, logits_.data() + m.firstSeq * vocab_, group);
      // The other ranks are inside the same step: a rank that cannot
      // finish it ends the job (a step on the device fails for a lost
      // device or a peer that missed a collective's deadline).
      if (!ran.isOk())
        group->abort(ran.message(), 1);
    }
    if (group->ppSize() > 1) {
      Status got = group->recv(logits_.data(),
                               int64_t(S) * vocab_ * int64_t(sizeof(float)),
                               group->logitsRank(), "step logits");
      if (!got.isOk())
        group->abort(got.message(), 1);
    }
  } else {
    KILN_RT_RETURN_IF_ERROR(runOn(arrays, logits_.data(), nullptr));
  }

  sampled.clear();
  logprobs.clear();
  accepted_.clear();
  acceptedLogprobs_.clear();
  int64_t firstRow = 0; // the chunk's first logits row
  for (size_t s = 0; s < S; ++s) {
    const Chunk &c = plan.chunks[s];
    const int64_t chunkRow = firstRow;
    firstRow += logitCount_[s];
    if (!c.samples)
      continue;
    auto it = live_.find(uint64_t(c.id));
    accepted_.emplace_back();
    acceptedLogprobs_.emplace_back();
    // Verify: row i of the chunk scores draft token i (greedy: the argmax;
    // sampling: the speculative-sampling rule, Sampler::verifyDraft); the
    // first rejected row gives the next token, or the last row after a
    // fully accepted draft.
    size_t kept = 0;
    bool rowsFinite = true, rejected = false;
    for (; kept < c.draft.size() && it != live_.end(); ++kept) {
      float *vrow = logits_.data() + size_t(chunkRow + int64_t(kept)) *
                                         size_t(vocab_);
      if (!checkFiniteLogits(vrow, vocab_, c.start + int64_t(kept), "").isOk()) {
        rowsFinite = false;
        break;
      }
      logRow_.assign(vrow, vrow + vocab_);
      bool ok = false;
      const int32_t t = it->second.sampler->verifyDraft(vrow, c.draft[kept], ok);
      const float lp = logProbability(logRow_.data(), vocab_, t);
      if (!ok) { // the rejected row's own token ends the step's output
        sampled.push_back(t);
        logprobs.push_back(lp);
        rejected = true;
        break;
      }
      accepted_.back().push_back(t);
      acceptedLogprobs_.back().push_back(lp);
    }
    if (rejected)
      continue;
    if (!rowsFinite) {
      bad.emplace_back(uint64_t(c.id),
                       "request " + std::to_string(c.id) +
                           ": the logits of a draft row are not finite");
      sampled.push_back(-1);
      logprobs.push_back(0.0f);
      continue;
    }
    float *row = logits_.data() + size_t(chunkRow + int64_t(kept)) *
                                      size_t(vocab_);
    // As the session: sampling a NaN or infinite row would print garbage
    // silently.
    Status finite = checkFiniteLogits(row, vocab_, c.start + c.count - 1,
                                      "request " + std::to_string(c.id) + ": ");
    if (!finite.isOk()) {
      bad.emplace_back(uint64_t(c.id), finite.message());
      sampled.push_back(-1);
      logprobs.push_back(0.0f);
      continue;
    }
    // The log-softmax of the raw logits: computed before sampling, which
    // turns the row into probabilities in place.
    logRow_.assign(row, row + vocab_);
    const int32_t token = it == live_.end() ? 0 : it->second.sampler->sample(row);
    sampled.push_back(token);
    logprobs.push_back(logProbability(logRow_.data(), vocab_, token));
  }
  return Status::ok();
}

kiln_rt_speculative_stats_t Engine::speculativeStats() {
  std::lock_guard<std::mutex> lock(mu_);
  return specStats_;
}

void Engine::observeStep(int64_t rows, double ms) {
  if (rows < 1 || rows > 64 || !(ms > 0.0))
    return;
  // Decayed sums: the recent steps weigh most (about 100 steps).
  constexpr double kDecay = 0.99;
  const double x = double(rows);
  fitN_ = kDecay * fitN_ + 1.0;
  fitX_ = kDecay * fitX_ + x;
  fitY_ = kDecay * fitY_ + ms;
  fitXX_ = kDecay * fitXX_ + x * x;
  fitXY_ = kDecay * fitXY_ + x * ms;
}

double Engine::predictStepMs(int64_t rows) const {
  if (fitN_ <= 0.0)
    return 1.0 + 0.4 * double(rows - 1); // no step yet: the shape only
  const double meanX = fitX_ / fitN_, meanY = fitY_ / fitN_;
  const double varX = fitXX_ / fitN_ - meanX * meanX;
  // One row count seen so far: assume a row costs 0.4 of a one-row step
  // (the multi-token GEMV's float32 arithmetic on this class of CPU,
  // docs/speculative.md), until steps of other sizes are measured.
  double b = varX > 1e-9 ? (fitXY_ / fitN_ - meanX * meanY) / varX
                         : 0.4 * meanY / std::max(meanX, 1.0);
  b = std::max(b, 1e-6);
  const double a = std::max(meanY - b * meanX, 1e-6);
  return a + b * double(rows);
}

void Engine::proposeDrafts() {
  // Rows the step would have without drafts: one per running sequence; the
  // drafts chosen so far this step add theirs.
  const int64_t base = std::max<int64_t>(1, scheduler_->numRunning());
  int64_t drafted = 0;
  for (auto &[id, l] : live_) {
    if (l.spec.mode == KILN_RT_SPECULATIVE_OFF)
      continue;
    const std::vector<int32_t> &tokens = scheduler_->tokens(kv::SequenceId(id));
    if (tokens.empty())
      continue;
    const int64_t want = l.spec.draft_max;
    std::vector<int32_t> draft;
    if (l.suffix) {
      // The index follows the sequence's tokens (a preempted and
      // recomputed sequence keeps its tokens).
      for (; l.suffixFed < int64_t(tokens.size()); ++l.suffixFed)
        l.suffix->append(tokens[size_t(l.suffixFed)]);
      draft = l.suffix->draft(want);
    } else {
      draft = spec::ngramDraft(tokens, want);
    }
    l.proposed = draft;
    if (draft.empty())
      continue;
    // The step's throughput: its `base` sequences yield one token each, a
    // draft of k yields E(k) - 1 more (E(k) = 1 + a + ... + a^k, Leviathan
    // et al. 2023, eq. 1) for k more rows, which every sequence of the step
    // waits for. So k maximises (base + E(k) - 1) / C(rows + k), and a
    // loaded step (large base) drafts only what pays for all of it.
    const int64_t k = l.controller.chooseBy(
        int64_t(draft.size()), [&](int64_t j, double expected) {
          return (double(base) + expected - 1.0) /
                 predictStepMs(base + drafted + j);
        });
    if (k == 0)
      continue;
    drafted += k;
    draft.resize(size_t(k));
    scheduler_->setDraft(kv::SequenceId(id), std::move(draft));
  }
}

Status Engine::requestError(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = errors_.find(id);
  return it == errors_.end() ? Status::ok() : dataLoss(it->second);
}

void Engine::run() {
  if (options_.threads > 0)
    cpu::setPoolThreads(options_.threads);
  int64_t promptTokens = 0, generated = 0, steps = 0, finishedCount = 0;
  for (;;) {
    std::vector<Pending> in;
    std::vector<uint64_t> cancels;
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] {
        return stopping_ || !incoming_.empty() || !cancels_.empty() ||
               !scheduler_->idle();
      });
      if (stopping_)
        break;
      in.swap(incoming_);
      cancels.swap(cancels_);
    }
    for (Pending &p : in) {
      const uint64_t id = uint64_t(p.request.id);
      const kiln_rt_sampler_params_t &s = p.sampling;
      Live live;
      live.sampler = std::make_unique<Sampler>(
          int32_t(vocab_), s.temperature, s.top_k, s.top_p,
          s.seed ? s.seed : 0x9E3779B97F4A7C15ull);
      live.callback = p.callback;
      live.user = p.user;
      live.promptLen = int64_t(p.request.prompt.size());
      live.spec = p.spec;
      if (p.spec.mode == KILN_RT_SPECULATIVE_SUFFIX) {
        live.suffix = std::make_unique<spec::SuffixIndex>();
        live.suffix->beginRequest(p.request.prompt);
        live.suffixFed = int64_t(p.request.prompt.size());
      }
      live_.emplace(id, std::move(live));
      if (!scheduler_->add(std::move(p.request)).isOk())
        finish(id, KILN_RT_FINISH_ERROR); // submit() checked the same limits
    }
    for (uint64_t id : cancels)
      scheduler_->cancel(kv::SequenceId(id));

    proposeDrafts();
    StepPlan plan = scheduler_->schedule();
    std::vector<int32_t> sampled;
    std::vector<float> logprobs;
    std::vector<std::pair<uint64_t, std::string>> bad;
    std::set<uint64_t> failed;
    accepted_.clear();
    acceptedLogprobs_.clear();
    if (!plan.chunks.empty()) {
      const auto t0 = std::chrono::steady_clock::now();
      Status st = step(plan, sampled, logprobs, bad);
      // The step-time model prices decode and verify rows: steps with a
      // prefill chunk (the GEMM path, attention over a prompt) are left out.
      const bool decodeOnly = std::all_of(
          plan.chunks.begin(), plan.chunks.end(), [](const Chunk &c) {
            return c.samples && c.count == 1 + int64_t(c.draft.size());
          });
      if (decodeOnly)
        observeStep(plan.tokens(),
                    std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - t0)
                        .count());
      ++steps;
      if (!st.isOk()) {
        // A failed step (a device error) leaves the pool in an unknown
        // state: every request fails with the message, and the engine
        // refuses new ones.
        std::vector<uint64_t> ids;
        {
          std::lock_guard<std::mutex> lock(mu_);
          failed_ = true;
          for (auto &entry : live_) {
            errors_[entry.first] = "request " + std::to_string(entry.first) +
                                   ": the step failed: " + st.message();
            ids.push_back(entry.first);
          }
          while (errors_.size() > kMaxErrors)
            errors_.erase(errors_.begin());
        }
        for (uint64_t id : ids) {
          scheduler_->cancel(kv::SequenceId(id));
          finish(id, KILN_RT_FINISH_ERROR);
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          stats_.num_running = scheduler_->numRunning();
          stats_.num_waiting = scheduler_->numWaiting();
          stats_.kv_blocks_used = numBlocks_ - blocks_->numAvailable();
        }
        continue;
      }
    }
    // A request whose logits are not finite ends with FINISH_ERROR (its
    // blocks freed like a cancellation); the others go on.
    if (!bad.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto &[id, message] : bad) {
        scheduler_->cancel(kv::SequenceId(id));
        failed.insert(id);
        errors_[id] = std::move(message);
        while (errors_.size() > kMaxErrors)
          errors_.erase(errors_.begin());
      }
    }
    // Prompt tokens computed this step (a decode row is a generated token).
    for (const Chunk &c : plan.chunks)
      if (auto it = live_.find(uint64_t(c.id)); it != live_.end())
        promptTokens += std::max<int64_t>(
            0, std::min(c.start + c.count, it->second.promptLen) - c.start);
    // Draft statistics and each request's acceptance estimate, before
    // complete() drops finished sequences from the plan's view.
    {
      size_t k = 0;
      for (const Chunk &c : plan.chunks) {
        if (!c.samples)
          continue;
        const size_t index = k++;
        auto it = live_.find(uint64_t(c.id));
        if (it == live_.end() || it->second.spec.mode == 0)
          continue;
        Live &l = it->second;
        const int64_t a = index < accepted_.size()
                              ? int64_t(accepted_[index].size())
                              : 0;
        if (!c.draft.empty()) {
          l.controller.observe(a, a < int64_t(c.draft.size()));
          std::lock_guard<std::mutex> lock(mu_);
          specStats_.draft_tokens += int64_t(c.draft.size());
          specStats_.accepted_tokens += a;
          ++specStats_.verify_rows;
        } else if (!l.proposed.empty() && index < sampled.size()) {
          // A plain decode row: the draft's first token against the
          // decoded one is free evidence.
          const bool hit = sampled[index] == l.proposed[0];
          l.controller.observe(hit ? 1 : 0, !hit);
        }
        l.proposed.clear();
      }
    }
    std::vector<int32_t> emitted;
    std::vector<Finished> done =
        scheduler_->complete(plan, sampled, &accepted_, &emitted);
    {
      size_t k = 0;
      for (const Chunk &c : plan.chunks)
        if (c.samples) {
          if (live_.count(uint64_t(c.id)) && k < emitted.size())
            generated += emitted[k];
          ++k;
        }
    }
    finishedCount += int64_t(done.size());
    bool idleWait;
    {
      // The counters first, so that a caller woken by a callback sees
      // this step reflected (blocks of finished requests freed).
      std::lock_guard<std::mutex> lock(mu_);
      const kv::PrefixCacheStats &pc = blocks_->stats();
      stats_.num_running = scheduler_->numRunning();
      stats_.num_waiting = scheduler_->numWaiting();
      stats_.kv_blocks_used = numBlocks_ - blocks_->numAvailable();
      stats_.prefix_cache_queries = pc.queriedTokens;
      stats_.prefix_cache_hits = pc.hitTokens;
      stats_.num_preemptions = scheduler_->numPreemptions();
      stats_.prompt_tokens = promptTokens;
      stats_.generation_tokens = generated;
      stats_.steps = steps;
      stats_.requests_finished = finishedCount;
      queued_ = int64_t(incoming_.size()) + scheduler_->numWaiting();
      idleWait = plan.chunks.empty() && !scheduler_->idle() &&
                 incoming_.empty() && cancels_.empty();
    }
    size_t next = 0;
    for (const Chunk &c : plan.chunks) {
      if (!c.samples)
        continue;
      const size_t index = next++;
      auto it = live_.find(uint64_t(c.id));
      if (it == live_.end() || failed.count(uint64_t(c.id)))
        continue;
      // The accepted draft tokens, then the sampled one, as far as the
      // scheduler appended them (a stop token or max_tokens ends earlier).
      std::vector<int32_t> tokens;
      std::vector<float> lps;
      if (index < accepted_.size()) {
        tokens = accepted_[index];
        lps = acceptedLogprobs_[index];
      }
      tokens.push_back(sampled[index]);
      lps.push_back(logprobs[index]);
      const size_t n = index < emitted.size()
                           ? std::min(size_t(emitted[index]), tokens.size())
                           : tokens.size();
      Live &l = it->second;
      for (size_t i = 0; i < n; ++i) {
        l.callback(l.user, uint64_t(c.id), tokens[i], lps[i],
                   KILN_RT_FINISH_NONE);
      }
    }
    for (const Finished &f : done) {
      finish(uint64_t(f.id), failed.count(uint64_t(f.id))
                                 ? KILN_RT_FINISH_ERROR
                             : f.reason == FinishReason::Length
                                 ? KILN_RT_FINISH_LENGTH
                             : f.reason == FinishReason::Stop
                                 ? KILN_RT_FINISH_STOP
                                 : KILN_RT_FINISH_CANCELLED);
    }
    if (idleWait) {
      // Nothing could run (cannot happen with the admission limits of
      // submit); do not spin.
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, std::chrono::milliseconds(10));
    }
  }
  // Shutdown: every request still known ends as cancelled.
  std::vector<Pending> in;
  {
    std::lock_guard<std::mutex> lock(mu_);
    in.swap(incoming_);
  }
  for (Pending &p : in)
    p.callback(p.user, uint64_t(p.request.id), -1, 0.0f,
               KILN_RT_FINISH_CANCELLED);
  std::vector<uint64_t> ids;
  for (auto &entry : live_)
    ids.push_back(entry.first);
  for (uint64_t id : ids) {
    scheduler_->cancel(kv::SequenceId(id));
    finish(id, KILN_RT_FINISH_CANCELLED);
  }
}

} // namespace kiln::rt::serve
