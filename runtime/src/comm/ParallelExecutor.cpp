//===- ParallelExecutor.cpp - Rank 0 drives the other ranks ---------------===//
#include "comm/ParallelExecutor.h"

#include "artifact/Artifact.h"
#include "cpu/Kernels.h"

#include <atomic>
#include <climits>
#include <mutex>
#include <map>
#include <vector>

namespace kiln::rt {

namespace {

enum class Op : uint32_t {
  Create = 1,
  Release = 2,
  Reset = 3,
  Prefill = 4,
  Decode = 5,
  End = 6,
  EngineCreate = 7, ///< n: block tokens, pos: blocks, token: batch-invariant;
                    ///< the step limits follow (int32 max seqs, max tokens,
                    ///< max blocks per sequence)
  EngineRelease = 8,
  Step = 9, ///< n: token rows, pos: sequences, token: max blocks,
            ///< reserved: copies; the arrays follow (packStep)
};

/// One broadcast command; a prefill's token ids follow in a second
/// broadcast of n int32.
struct Command {
  uint32_t op = 0;
  uint32_t session = 0;
  int64_t n = 0;   ///< prefill: tokens; reset: 1 when dirty (see Op)
  int64_t pos = 0; ///< prefill, decode: position of the first token
  int32_t token = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(Command) == 32, "the command is broadcast as bytes");

std::atomic<uint32_t> nextSession{1};

/// Rank 0: broadcasts `c` within the deadline, or ends the job.
void send(Communicator &comm, Command c) {
  Status s = comm.broadcast(&c, sizeof(c), 0, "command", /*bounded=*/true);
  if (!s.isOk())
    comm.abort(s.message(), 1);
}

/// The command `op` of session or engine `id` (the other fields zero).
Command command(Op op, uint32_t id) {
  Command c;
  c.op = uint32_t(op);
  c.session = id;
  return c;
}

class ParallelExecutor final : public Executor {
public:
  ParallelExecutor(Communicator &comm, std::unique_ptr<Executor> inner,
                   int64_t vocab)
      : comm_(comm), inner_(std::move(inner)), id_(nextSession++),
        vocab_(vocab) {
    std::lock_guard<std::mutex> lock(comm_.stepMutex());
    send(comm_, command(Op::Create, id_));
  }
  ~ParallelExecutor() override {
    std::lock_guard<std::mutex> lock(comm_.stepMutex());
    send(comm_, command(Op::Release, id_));
  }

  Status reset(bool dirty) override {
    std::lock_guard<std::mutex> lock(comm_.stepMutex());
    Command c = command(Op::Reset, id_);
    c.n = dirty ? 1 : 0;
    send(comm_, c);
    return inner_->reset(dirty);
  }
  Status prefill(const int32_t *tokens, int64_t n, int64_t pos) override {
    std::lock_guard<std::mutex> lock(comm_.stepMutex());
    Command c = command(Op::Prefill, id_);
    c.n = n;
    c.pos = pos;
    send(comm_, c);
    std::vector<int32_t> ids(tokens, tokens + n);
    Status s = comm_.broadcast(ids.data(), n * int64_t(sizeof(int32_t)), 0,
                               "prefill tokens", /*bounded=*/true);
    if (!s.isOk())
      comm_.abort(s.message(), 1);
    // Received even when this rank's part failed: the last stage sends
    // them after every step, and the next step must not read these.
    Status ran = inner_->prefill(tokens, n, pos);
    receiveLogits();
    return ran;
  }
  Status decode(int32_t token, int64_t pos) override {
    std::lock_guard<std::mutex> lock(comm_.stepMutex());
    Command c = command(Op::Decode, id_);
    c.pos = pos;
    c.token = token;
    send(comm_, c);
    Status s = inner_->decode(token, pos);
    receiveLogits();
    return s;
  }
  const float *logits() override {
    return comm_.ppSize() > 1 ? logits_.data() : inner_->logits();
  }
  void setTrace(TraceRecorder *recorder) override {
    inner_->setTrace(recorder);
  }

private:
  /// Pipeline parallelism: the logits are the last stage's (its tp rank 0
  /// sends them after the step, sendLogits); rank 0 samples from them.
  void receiveLogits() {
    if (comm_.ppSize() == 1)
      return;
    logits_.resize(size_t(vocab_));
    Status s = comm_.recv(logits_.data(), vocab_ * int64_t(sizeof(float)),
                          comm_.logitsRank(), "logits");
    if (!s.isOk())
      comm_.abort(s.message(), 1);
  }

  Communicator &comm_;
  std::unique_ptr<Executor> inner_;
  uint32_t id_;
  int64_t vocab_;
  std::vector<float> logits_;
};

} // namespace

Status createParallelExecutor(const Artifact &artifact, Communicator &comm,
                              std::unique_ptr<Executor> inner,
                              std::unique_ptr<Executor> &out) {
  out = std::make_unique<ParallelExecutor>(comm, std::move(inner),
                                           artifact.manifest().vocabSize);
  return Status::ok();
}

void endFollowers(Communicator &comm) {
  std::lock_guard<std::mutex> lock(comm.stepMutex());
  send(comm, command(Op::End, 0));
}

/// int32 values of a step's arrays, in the order sendStep writes them: the
/// micro-batch count, then the arrays.
static int64_t stepValues(int64_t seqs, int64_t tokens, int64_t maxBlocks,
                          int64_t copies) {
  return 1 + 3 * seqs + seqs * maxBlocks + 2 * tokens + 2 * copies;
}

uint32_t sendEngineCreate(Communicator &comm, int64_t blockTokens,
                          int64_t numBlocks, const serve::StepLimits &limits,
                          bool batchInvariant) {
  std::lock_guard<std::mutex> lock(comm.stepMutex());
  Command c = command(Op::EngineCreate, nextSession++);
  c.n = blockTokens;
  c.pos = numBlocks;
  c.token = batchInvariant ? 1 : 0;
  send(comm, c);
  int32_t values[3] = {limits.maxSeqs, limits.maxTokens, limits.maxBlocks};
  Status s = comm.broadcast(values, sizeof(values), 0, "engine step limits",
                            /*bounded=*/true);
  if (!s.isOk())
    comm.abort(s.message(), 1);
  return c.session;
}

void sendEngineRelease(Communicator &comm, uint32_t id) {
  std::lock_guard<std::mutex> lock(comm.stepMutex());
  send(comm, command(Op::EngineRelease, id));
}

void sendStep(Communicator &comm, uint32_t id, const serve::StepArrays &a,
              int32_t microBatches) {
  Command c = command(Op::Step, id);
  c.n = a.numTokens;
  c.pos = a.numSeqs;
  c.token = a.maxBlocks;
  c.reserved = uint32_t(a.numCopies);
  send(comm, c);
  std::vector<int32_t> packed;
  packed.reserve(size_t(
      stepValues(a.numSeqs, a.numTokens, a.maxBlocks, a.numCopies)));
  auto put = [&](const int32_t *p, int64_t n) {
    packed.insert(packed.end(), p, p + n);
  };
  packed.push_back(microBatches);
  put(a.rowStart, a.numSeqs);
  put(a.rowCount, a.numSeqs);
  put(a.pos, a.numSeqs);
  put(a.blockTables, int64_t(a.numSeqs) * a.maxBlocks);
  put(a.tokens, a.numTokens);
  put(a.positions, a.numTokens);
  put(a.copySrc, a.numCopies);
  put(a.copyDst, a.numCopies);
  Status s = comm.broadcast(packed.data(),
                            int64_t(packed.size() * sizeof(int32_t)), 0,
                            "step arrays", /*bounded=*/true);
  if (!s.isOk())
    comm.abort(s.message(), 1);
}

Status followRankZero(const Artifact &artifact, Communicator &comm) {
  std::map<uint32_t, std::unique_ptr<Executor>> sessions;
  struct FollowerEngine {
    std::unique_ptr<serve::CpuStepper> stepper;       ///< a cpu artifact's
    std::unique_ptr<CudaStepper> deviceStepper;       ///< a cuda artifact's
    int64_t numBlocks = 0;
    bool batchInvariant = false;
    std::vector<float> logits;
  };
  std::map<uint32_t, FollowerEngine> engines;
  struct ReleaseKernels { // the batch-invariant kernels engines acquired
    int held = 0;
    ~ReleaseKernels() {
      for (; held > 0; --held)
        cpu::releaseBatchInvariantKernels();
    }
  } kernels;
  const int64_t vocab = artifact.manifest().vocabSize;
  auto malformed = [&](const Command &c, const std::string &why) {
    return internalError("rank " + std::to_string(comm.rank()) +
                         ": malformed command from rank 0 (op " +
                         std::to_string(c.op) + ", session " +
                         std::to_string(c.session) + "): " + why +
                         " (mismatched kiln versions across ranks?)");
  };
  // Pipeline parallelism: the last stage's tp rank 0 holds the logits of
  // every step and sends them to rank 0, which samples.
  std::vector<float> noLogits;
  auto sendLogits = [&](const float *logits, int64_t count) {
    if (comm.ppSize() == 1 || comm.rank() != comm.logitsRank())
      return;
    if (!logits) { // the executor could not read them: send zeros
      noLogits.assign(size_t(count), 0.0f);
      logits = noLogits.data();
    }
    Status st = comm.send(logits, count * int64_t(sizeof(float)), 0, "logits");
    if (!st.isOk())
      comm.abort(st.message(), 1);
  };
  for (;;) {
    Command c;
    KILN_RT_RETURN_IF_ERROR(
        comm.broadcast(&c, sizeof(c), 0, "command", /*bounded=*/false));
    if (Op(c.op) == Op::End)
      return Status::ok();
    if (Op(c.op) == Op::Create) {
      std::unique_ptr<Executor> e;
      KILN_RT_RETURN_IF_ERROR(artifact.createRankExecutor(e));
      sessions[c.session] = std::move(e);
      continue;
    }
    if (Op(c.op) == Op::EngineCreate) {
      int32_t values[3] = {0, 0, 0};
      KILN_RT_RETURN_IF_ERROR(comm.broadcast(values, sizeof(values), 0,
                                             "engine step limits",
                                             /*bounded=*/true));
      const bool cuda = artifact.target() == Target::Cuda;
      if (!artifact.hasStep() || (!cuda && !artifact.step()) || c.n < 1 ||
          c.n > 1024 || c.pos < 1 || c.pos > INT32_MAX / 2)
        return malformed(c, "engine of " + std::to_string(c.pos) +
                                " blocks of " + std::to_string(c.n) +
                                " positions");
      serve::StepLimits limits;
      limits.maxSeqs = values[0];
      limits.maxTokens = values[1];
      limits.maxBlocks = values[2];
      if (limits.maxSeqs < 1 || limits.maxTokens < limits.maxSeqs ||
          limits.maxTokens > artifact.stepMaxTokens() || limits.maxBlocks < 1 ||
          limits.maxBlocks > artifact.contextLength())
        return malformed(c, "step limits of " + std::to_string(values[0]) +
                                " sequences, " + std::to_string(values[1]) +
                                " token rows and " +
                                std::to_string(values[2]) + " blocks");
      FollowerEngine e;
      if (cuda) {
        Status made = serve::createDeviceStepper(artifact, c.n, c.pos, limits,
                                                 e.deviceStepper);
        // Rank 0 made its pool and waits in the first step's collectives:
        // this rank's failure ends the job, naming it.
        if (!made.isOk())
          comm.abort(made.message(), 1);
      } else {
        KILN_RT_RETURN_IF_ERROR(
            serve::CpuStepper::create(artifact, c.n, c.pos, e.stepper));
      }
      e.numBlocks = c.pos;
      if (c.token) {
        cpu::acquireBatchInvariantKernels();
        ++kernels.held;
        e.batchInvariant = true;
      }
      engines[c.session] = std::move(e);
      continue;
    }
    if (Op(c.op) == Op::EngineRelease || Op(c.op) == Op::Step) {
      auto e = engines.find(c.session);
      if (e == engines.end())
        return malformed(c, "no such engine");
      if (Op(c.op) == Op::EngineRelease) {
        if (e->second.batchInvariant) {
          cpu::releaseBatchInvariantKernels();
          --kernels.held;
        }
        engines.erase(e);
        continue;
      }
      const int64_t T = c.n, S = c.pos, maxBlocks = c.token,
                    copies = int64_t(c.reserved);
      if (T < 1 || T > artifact.stepMaxTokens() || S < 1 || S > T ||
          maxBlocks < 1 || maxBlocks > e->second.numBlocks || copies > S)
        return malformed(c, "step of " + std::to_string(S) +
                                " sequences and " + std::to_string(T) +
                                " token rows");
      std::vector<int32_t> v(size_t(stepValues(S, T, maxBlocks, copies)));
      KILN_RT_RETURN_IF_ERROR(comm.broadcast(
          v.data(), int64_t(v.size() * sizeof(int32_t)), 0, "step arrays",
          /*bounded=*/true));
      serve::StepArrays a;
      a.numSeqs = int32_t(S);
      a.numTokens = int32_t(T);
      a.maxBlocks = int32_t(maxBlocks);
      a.numCopies = int32_t(copies);
      const int32_t microBatches = v[0];
      if (microBatches < 1 || microBatches > S)
        return malformed(c, std::to_string(microBatches) +
                                " micro-batches of " + std::to_string(S) +
                                " sequences");
      const int32_t *p = v.data() + 1;
      auto take = [&](int64_t n) {
        const int32_t *q = p;
        p += n;
        return q;
      };
      a.rowStart = take(S);
      a.rowCount = take(S);
      a.pos = take(S);
      a.blockTables = take(S * maxBlocks);
      a.tokens = take(T);
      a.positions = take(T);
      a.copySrc = take(copies);
      a.copyDst = take(copies);
      // Rank 0 built these from its scheduler; a follower checks what the
      // kernels index with before trusting them.
      int64_t rows = 0;
      for (int64_t s = 0; s < S; ++s) {
        if (a.rowStart[s] != rows || a.rowCount[s] < 1 || a.pos[s] < 0 ||
            a.pos[s] + a.rowCount[s] > artifact.contextLength())
          return malformed(c, "sequence " + std::to_string(s) + "'s rows");
        rows += a.rowCount[s];
      }
      if (rows != T)
        return malformed(c, "rows do not add up to the step's tokens");
      for (int64_t i = 0; i < S * maxBlocks; ++i)
        if (a.blockTables[i] < 0 || a.blockTables[i] >= e->second.numBlocks)
          return malformed(c, "block " + std::to_string(a.blockTables[i]));
      for (int64_t i = 0; i < copies; ++i)
        if (a.copySrc[i] < 0 || a.copySrc[i] >= e->second.numBlocks ||
            a.copyDst[i] < 0 || a.copyDst[i] >= e->second.numBlocks)
          return malformed(c, "copy-on-write block");
      for (int64_t i = 0; i < T; ++i)
        if (a.tokens[i] < 0 || a.tokens[i] >= vocab)
          return malformed(c, "token id " + std::to_string(a.tokens[i]));
      e->second.logits.resize(size_t(S * vocab));
      // The logits go to rank 0 after the last micro-batch: every transfer
      // inside the step flows to later stages, so no stage waits on an
      // earlier one's receive (a send of micro-batch k's logits before
      // stage 0 has sent k + 1 would deadlock against it).
      for (const serve::MicroBatch &m : serve::splitStep(a, microBatches)) {
        float *rows = e->second.logits.data() + int64_t(m.firstSeq) * vocab;
        if (!e->second.deviceStepper) {
          e->second.stepper->run(m.arrays, rows, &comm);
          continue;
        }
        // The other ranks are inside the same step: a device step that
        // fails (a lost device, a peer past the deadline) ends the job.
        Status ran =
            serve::runDeviceStep(*e->second.deviceStepper, m.arrays, rows, vocab);
        if (!ran.isOk())
          comm.abort(ran.message(), 1);
      }
      sendLogits(e->second.logits.data(), S * vocab);
      continue;
    }
    auto it = sessions.find(c.session);
    if (it == sessions.end())
      return malformed(c, "no such session");
    Executor &e = *it->second;
    // Rank 0 checked token ids and positions before sending; a step's own
    // failure (non-finite logits) is rank 0's to report, so followers go on,
    // unless a peer missed the step's deadline: then the job ends here.
    auto check = [&](Status st) {
      if (st.code() == KILN_RT_DEADLINE_EXCEEDED)
        comm.abort(st.message(), 1);
    };
    switch (Op(c.op)) {
    case Op::Release:
      sessions.erase(it);
      break;
    case Op::Reset:
      check(e.reset(c.n != 0));
      break;
    case Op::Prefill: {
      if (c.n < 1 || c.n > artifact.contextLength() || c.pos < 0)
        return malformed(c, "prefill of " + std::to_string(c.n) +
                                " tokens at position " +
                                std::to_string(c.pos));
      std::vector<int32_t> ids(size_t(c.n));
      KILN_RT_RETURN_IF_ERROR(comm.broadcast(
          ids.data(), c.n * int64_t(sizeof(int32_t)), 0, "prefill tokens",
          /*bounded=*/true));
      for (int32_t id : ids)
        if (id < 0 || id >= vocab)
          return malformed(c, "token id " + std::to_string(id));
      check(e.prefill(ids.data(), c.n, c.pos));
      sendLogits(e.logits(), vocab);
      break;
    }
    case Op::Decode:
      if (c.token < 0 || c.token >= vocab || c.pos < 0)
        return malformed(c, "decode of token " + std::to_string(c.token));
      check(e.decode(c.token, c.pos));
      sendLogits(e.logits(), vocab);
      break;
    default:
      return malformed(c, "unknown op");
    }
  }
}

} // namespace kiln::rt
