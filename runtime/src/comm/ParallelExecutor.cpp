//===- ParallelExecutor.cpp - Rank 0 drives the other ranks ---------------===//
#include "comm/ParallelExecutor.h"

#include "artifact/Artifact.h"

#include <atomic>
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
};

/// One broadcast command; a prefill's token ids follow in a second
/// broadcast of n int32.
struct Command {
  uint32_t op = 0;
  uint32_t session = 0;
  int64_t n = 0;   ///< prefill: tokens; reset: 1 when dirty
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

class ParallelExecutor final : public Executor {
public:
  ParallelExecutor(Communicator &comm, std::unique_ptr<Executor> inner)
      : comm_(comm), inner_(std::move(inner)), id_(nextSession++) {
    Command c;
    c.op = uint32_t(Op::Create);
    c.session = id_;
    send(comm_, c);
  }
  ~ParallelExecutor() override {
    Command c;
    c.op = uint32_t(Op::Release);
    c.session = id_;
    send(comm_, c);
  }

  Status reset(bool dirty) override {
    Command c;
    c.op = uint32_t(Op::Reset);
    c.session = id_;
    c.n = dirty ? 1 : 0;
    send(comm_, c);
    return inner_->reset(dirty);
  }
  Status prefill(const int32_t *tokens, int64_t n, int64_t pos) override {
    Command c;
    c.op = uint32_t(Op::Prefill);
    c.session = id_;
    c.n = n;
    c.pos = pos;
    send(comm_, c);
    std::vector<int32_t> ids(tokens, tokens + n);
    Status s = comm_.broadcast(ids.data(), n * int64_t(sizeof(int32_t)), 0,
                               "prefill tokens", /*bounded=*/true);
    if (!s.isOk())
      comm_.abort(s.message(), 1);
    return inner_->prefill(tokens, n, pos);
  }
  Status decode(int32_t token, int64_t pos) override {
    Command c;
    c.op = uint32_t(Op::Decode);
    c.session = id_;
    c.pos = pos;
    c.token = token;
    send(comm_, c);
    return inner_->decode(token, pos);
  }
  const float *logits() override { return inner_->logits(); }
  void setTrace(TraceRecorder *recorder) override {
    inner_->setTrace(recorder);
  }

private:
  Communicator &comm_;
  std::unique_ptr<Executor> inner_;
  uint32_t id_;
};

} // namespace

Status createParallelExecutor(const Artifact &, Communicator &comm,
                              std::unique_ptr<Executor> inner,
                              std::unique_ptr<Executor> &out) {
  out = std::make_unique<ParallelExecutor>(comm, std::move(inner));
  return Status::ok();
}

void endFollowers(Communicator &comm) {
  Command c;
  c.op = uint32_t(Op::End);
  send(comm, c);
}

Status followRankZero(const Artifact &artifact, Communicator &comm) {
  std::map<uint32_t, std::unique_ptr<Executor>> sessions;
  const int64_t vocab = artifact.manifest().vocabSize;
  auto malformed = [&](const Command &c, const std::string &why) {
    return internalError("rank " + std::to_string(comm.rank()) +
                         ": malformed command from rank 0 (op " +
                         std::to_string(c.op) + ", session " +
                         std::to_string(c.session) + "): " + why +
                         " (mismatched kiln versions across ranks?)");
  };
  for (;;) {
    Command c;
    KILN_RT_RETURN_IF_ERROR(
        comm.broadcast(&c, sizeof(c), 0, "command", /*bounded=*/false));
    if (Op(c.op) == Op::End)
      return Status::ok();
    if (Op(c.op) == Op::Create) {
      std::unique_ptr<Executor> e;
      KILN_RT_RETURN_IF_ERROR(createCpuExecutor(artifact, e));
      sessions[c.session] = std::move(e);
      continue;
    }
    auto it = sessions.find(c.session);
    if (it == sessions.end())
      return malformed(c, "no such session");
    Executor &e = *it->second;
    // Rank 0 checked token ids and positions before sending; a step's own
    // failure (non-finite logits) is rank 0's to report, so followers go on.
    switch (Op(c.op)) {
    case Op::Release:
      sessions.erase(it);
      break;
    case Op::Reset:
      (void)e.reset(c.n != 0);
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
      (void)e.prefill(ids.data(), c.n, c.pos);
      break;
    }
    case Op::Decode:
      if (c.token < 0 || c.token >= vocab || c.pos < 0)
        return malformed(c, "decode of token " + std::to_string(c.token));
      (void)e.decode(c.token, c.pos);
      break;
    default:
      return malformed(c, "unknown op");
    }
  }
}

} // namespace kiln::rt
