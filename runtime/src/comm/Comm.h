//===- Comm.h - This process's tensor-parallel group -------------*- C++ -*-===//
//
// A process launched as one rank of several (`mpirun -np N kiln-run ...`)
// joins the job once (joinGroup): libkiln_runtime.so dlopen()s the
// communication backend (libkiln_comm_mpi.so, CommBackend.h) from its own
// directory, so single-process users need neither MPI nor the library.
// The group then serves
//   - the partitioned plan's kiln_k_all_reduce (kernel_abi.h), through the
//     execution context's `comm`;
//   - rank 0's commands to the other ranks (ParallelExecutor.h).
// Every collective of a step has a deadline, KILN_COMM_TIMEOUT_S seconds
// (default 30): a peer that is dead or hung ends the whole job with a
// message naming the rank that waited, never a hang (docs/parallelism.md).
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_COMM_COMM_H
#define KILN_RUNTIME_COMM_COMM_H

#include "base/Status.h"
#include "comm/CommBackend.h"

#include <cstdint>
#include <mutex>
#include <string>

namespace kiln::rt {

class Communicator {
public:
  Communicator(const kiln_comm_api_t *api, int32_t rank, int32_t size,
               int64_t timeoutMs)
      : api_(api), rank_(rank), size_(size), timeoutMs_(timeoutMs) {}

  int32_t rank() const { return rank_; }
  int32_t size() const { return size_; }
  /// The deadline of a step's collectives, in milliseconds.
  int64_t timeoutMs() const { return timeoutMs_; }

  /// In place, buf[0, count) = sum over the ranks (CommBackend.h
  /// all_reduce_sum; elem KILN_ELEM_*), within the deadline.
  Status allReduceSum(void *buf, int64_t count, int32_t elem,
                      const char *what);
  /// recv[r * bytes, (r + 1) * bytes) = rank r's send[0, bytes), on every
  /// rank r of the job (`tpGroup` false) or of this rank's tensor-parallel
  /// group, within the deadline.
  Status allGather(const void *send, void *recv, int64_t bytes,
                   const char *what, bool tpGroup = false);
  /// Sequence parallelism, over this rank's tensor-parallel group
  /// (CommBackend.h reduce_scatter_sum / all_gather_v): `counts` elements
  /// (`bytes` bytes) per rank of the group, in rank order.
  Status reduceScatterSum(const void *send, void *recv, const int64_t *counts,
                          int32_t elem, const char *what);
  Status allGatherV(const void *send, void *recv, const int64_t *bytes,
                    const char *what);
  /// Pipeline geometry of the artifact the ranks run: `tp` ranks per
  /// stage, `pp` stages (tp * pp = size()); splits the job into the
  /// stages' tensor-parallel groups (CommBackend.h set_tp_group).
  Status setPipeline(int32_t tp, int32_t pp);
  int32_t tpSize() const { return tp_; }
  int32_t ppSize() const { return pp_; }
  /// This rank's pipeline stage and tensor-parallel rank.
  int32_t stage() const { return rank_ / tp_; }
  int32_t tpRank() const { return rank_ % tp_; }
  /// The rank of `stage`'s shard with this rank's tensor-parallel rank.
  int32_t rankOfStage(int64_t stage) const {
    return int32_t(stage) * tp_ + tpRank();
  }
  /// The rank that holds the logits: the last stage's tp rank 0.
  int32_t logitsRank() const { return (pp_ - 1) * tp_; }
  /// Point-to-point bytes to / from rank `peer`, within the deadline.
  Status send(const void *buf, int64_t bytes, int32_t peer, const char *what);
  Status recv(void *buf, int64_t bytes, int32_t peer, const char *what);
  /// The tensor-parallel group's size (the all-reduces' ranks).
  int32_t groupSize() const { return tp_; }
  /// Rank `root`'s buf[0, bytes) to every rank. `bounded`: within the
  /// deadline; otherwise waits as long as it takes (a rank idling until
  /// rank 0's next command).
  Status broadcast(void *buf, int64_t bytes, int32_t root, const char *what,
                   bool bounded);
  /// Ends every rank of the job with `message` (prefixed with this rank)
  /// and exit status `code`.
  [[noreturn]] void abort(const std::string &message, int32_t code);
  /// Leaves the job cleanly (MPI_Finalize); every rank must call it.
  void finalize();

  /// Rank 0 holds it from broadcasting a command until its own part of the
  /// command has run: the other ranks run commands one at a time, so the
  /// collectives of two commands (a session's and the serving engine's,
  /// on different threads) must not interleave.
  std::mutex &stepMutex() { return stepMu_; }

private:
  const kiln_comm_api_t *api_;
  /// The backend's calls must not overlap (MPI_THREAD_SERIALIZED).
  std::mutex mu_;
  std::mutex stepMu_;
  int32_t rank_, size_;
  int32_t tp_ = size_, pp_ = 1; // setPipeline
  int64_t timeoutMs_;
};

/// True when the environment says this process is one rank of a job
/// started by mpirun (Open MPI's OMPI_COMM_WORLD_SIZE, PMIx's PMIX_RANK or
/// PMI's PMI_SIZE), even a job of one rank.
bool launchedAsRank();

/// Joins the job this process was launched in (once per process; later
/// calls return the same group). Errors: the backend library is missing
/// (built without MPI) or cannot be loaded, MPI_Init failed, or
/// KILN_COMM_TIMEOUT_S is not a positive number of seconds.
Status joinGroup(Communicator *&out);

/// The group joined by joinGroup, or null.
Communicator *processGroup();

} // namespace kiln::rt

#endif // KILN_RUNTIME_COMM_COMM_H
