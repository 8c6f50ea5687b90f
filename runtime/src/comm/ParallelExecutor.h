//===- ParallelExecutor.h - Rank 0 drives the other ranks --------*- C++ -*-===//
//
// A partitioned artifact (manifest parallel.tp = N) runs as N processes,
// each with its own shard of the weights. Rank 0 owns the tokenizer, the
// sampler and every caller-facing API; the other ranks follow it: each
// session step of rank 0 is first broadcast as a 32-byte command (and, for a
// prefill, its token ids), then every rank runs the same entry point on the
// same tokens, meeting at the plan's all-reduces (kernel_abi.h
// kiln_k_all_reduce). After the last all-reduce every rank holds the same
// residual stream, so rank 0's logits are the model's.
//
// Commands: create / release a session, reset, prefill (n tokens at pos),
// decode (one token at pos); create / release a serving engine's pool (its
// step limits follow the command) and run one of its batched steps (on the
// host, or on each rank's device for a cuda artifact) (the step's arrays follow the command; with
// pipeline stages every rank runs it as micro-batches, so the stages
// overlap); and
// end (rank 0 released the artifact: followers return from
// followRankZero).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_COMM_PARALLELEXECUTOR_H
#define KILN_RUNTIME_COMM_PARALLELEXECUTOR_H

#include "comm/Comm.h"
#include "serve/CpuStepper.h"
#include "serve/DeviceStepper.h"
#include "session/Executor.h"

#include <memory>

namespace kiln::rt {

class Artifact;

/// Rank 0's executor for a partitioned artifact: broadcasts each call to
/// the other ranks, then runs it on `inner` (this rank's shard).
Status createParallelExecutor(const Artifact &artifact, Communicator &comm,
                              std::unique_ptr<Executor> inner,
                              std::unique_ptr<Executor> &out);

/// Rank 0's serving engine (serve/Engine.h): every rank allocates a paged
/// pool of `numBlocks` blocks of `blockTokens` positions, in host memory
/// (the CPU kernels in their batch-invariant mode when `batchInvariant`)
/// or on its device for steps up to `limits` (a cuda artifact,
/// serve/DeviceStepper.h); returns the engine's id in the group.
uint32_t sendEngineCreate(Communicator &comm, int64_t blockTokens,
                          int64_t numBlocks, const serve::StepLimits &limits,
                          bool batchInvariant);
/// One step of engine `id` (hold comm.stepMutex() until rank 0 has run it
/// too): the step's arrays go to every rank, with the number of pipeline
/// micro-batches every rank cuts it into (serve::splitStep; 1 without
/// pipeline stages). With stages the last stage's tp rank 0 sends the
/// step's logits to rank 0 once it has run every micro-batch.
void sendStep(Communicator &comm, uint32_t id, const serve::StepArrays &step,
              int32_t microBatches);
/// The engine is gone: the followers free its pool.
void sendEngineRelease(Communicator &comm, uint32_t id);

/// Rank 0, when it releases the artifact: tells the followers to return.
void endFollowers(Communicator &comm);

/// Ranks other than 0: runs rank 0's commands on this rank's shard of
/// `artifact` until rank 0 releases its artifact. Waits without a deadline
/// between commands (rank 0 may be waiting on its user); a step's
/// collectives have the group's deadline. Errors: a malformed command.
Status followRankZero(const Artifact &artifact, Communicator &comm);

} // namespace kiln::rt

#endif // KILN_RUNTIME_COMM_PARALLELEXECUTOR_H
