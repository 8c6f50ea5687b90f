//===- CommBackend.h - C interface of a communication backend ----*- C++ -*-===//
//
// The collectives a tensor-parallel group of ranks needs, and the
// point-to-point transfers between pipeline stages, as a C table of
// functions exported by a backend library that libkiln_runtime.so dlopen()s
// only when a process is launched as one rank of several (so single-process
// users need no MPI): libkiln_comm_mpi.so implements it over Open MPI
// (MPI_COMM_WORLD, one rank per process, docs/parallelism.md).
//
// Every collective takes a deadline: `timeout_ms` > 0 bounds the wait for the
// other ranks (a dead or hung peer), after which the call fails with a
// message naming this rank, the collective and the wait; timeout_ms <= 0
// waits without bound (a rank idling until rank 0's next command, which may
// wait on a user). Waiting polls the nonblocking collective (MPI_I*) and
// sleeps between polls once the first millisecond has passed, so an idle
// rank does not hold a core.
//
// Functions return 0 on success and a kiln_rt_status_code_t (KILN_RT_*) on
// failure, with `err->message` set (NUL-terminated, truncated to fit).
// Calls must not overlap: MPI is initialized with MPI_THREAD_SERIALIZED (the
// runtime serializes its calls; a serving engine's thread runs the steps),
// and with a host-initialized MPI below that, only init's thread may call.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RT_COMM_COMMBACKEND_H
#define KILN_RT_COMM_COMMBACKEND_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// Bump whenever the table below changes; the runtime refuses a mismatch.
#define KILN_COMM_INTERFACE_VERSION 3

/// all_gather's `scope`: every rank of the job, or this rank's
/// tensor-parallel group (set_tp_group; the whole job until it is set).
#define KILN_COMM_SCOPE_WORLD 0
#define KILN_COMM_SCOPE_TP 1

typedef struct kiln_comm_error_t {
  char message[512];
} kiln_comm_error_t;

typedef struct kiln_comm_api_t {
  uint32_t interface_version; ///< KILN_COMM_INTERFACE_VERSION
  uint32_t struct_size;       ///< sizeof(kiln_comm_api_t)
  const char *name;           ///< "mpi": the backend, for messages

  /// Joins the job (MPI_Init_thread with MPI_THREAD_SERIALIZED on the first
  /// call; later calls return the same values): this process's rank in
  /// [0, size) and the number of ranks.
  int32_t (*init)(int32_t *rank, int32_t *size, kiln_comm_error_t *err);

  /// In place, buf[0, count) = elementwise sum over every rank of this
  /// rank's tensor-parallel group (set_tp_group; the whole job until then)
  /// of its buf[0, count) (MPI_Iallreduce with MPI_SUM; every rank gets the same
  /// bits). elem: KILN_ELEM_F32, _F16 or _BF16 (kernel_abi.h); 16-bit
  /// values are summed in float32 and rounded once to nearest even.
  /// `what` names the reduction in a timeout's message ("layers.3.wo").
  int32_t (*all_reduce_sum)(void *buf, int64_t count, int32_t elem,
                            const char *what, int64_t timeout_ms,
                            kiln_comm_error_t *err);

  /// buf[0, bytes) of rank `root` is copied to every rank's buf
  /// (MPI_Ibcast of bytes).
  int32_t (*broadcast)(void *buf, int64_t bytes, int32_t root,
                       const char *what, int64_t timeout_ms,
                       kiln_comm_error_t *err);

  /// recv[r * bytes, (r + 1) * bytes) = rank r's send[0, bytes), on every
  /// rank r of `scope` (KILN_COMM_SCOPE_*; MPI_Iallgather of bytes). recv
  /// holds (ranks in scope) * bytes.
  int32_t (*all_gather)(const void *send, void *recv, int64_t bytes,
                        int32_t scope, const char *what, int64_t timeout_ms,
                        kiln_comm_error_t *err);
  /// Pipeline parallelism: splits the job into tensor-parallel groups of
  /// `tp` consecutive ranks (pipeline stage s: ranks [s * tp, (s + 1) *
  /// tp); MPI_Comm_split, collective over the job, without a deadline).
  /// Once per job; the same tp again is a no-op.
  int32_t (*set_tp_group)(int32_t tp, kiln_comm_error_t *err);
  /// Point-to-point buf[0, bytes) to rank `dest` (MPI_Isend), matched in
  /// order by its recv from this rank.
  int32_t (*send)(const void *buf, int64_t bytes, int32_t dest,
                  const char *what, int64_t timeout_ms,
                  kiln_comm_error_t *err);
  /// buf[0, bytes) from rank `source`'s matching send (MPI_Irecv).
  int32_t (*recv)(void *buf, int64_t bytes, int32_t source, const char *what,
                  int64_t timeout_ms, kiln_comm_error_t *err);

  /// Sequence parallelism (kiln_rt/sequence_shard.h). reduce_scatter_sum:
  /// recv[0, counts[me]) = elements [offset of me, + counts[me]) of the
  /// elementwise sum over this rank's tensor-parallel group of every rank's
  /// send[0, sum of counts), where rank r's block starts at the sum of
  /// counts[0, r) (MPI_Ireduce_scatter with MPI_SUM; 16-bit values summed in
  /// float32 and rounded once). counts: one per rank of the group.
  int32_t (*reduce_scatter_sum)(const void *send, void *recv,
                                const int64_t *counts, int32_t elem,
                                const char *what, int64_t timeout_ms,
                                kiln_comm_error_t *err);
  /// recv[offset of r, + bytes[r]) = rank r's send[0, bytes[r]) for every
  /// rank r of the tensor-parallel group, blocks in rank order
  /// (MPI_Iallgatherv of bytes). bytes: one per rank of the group.
  int32_t (*all_gather_v)(const void *send, void *recv, const int64_t *bytes,
                          const char *what, int64_t timeout_ms,
                          kiln_comm_error_t *err);

  /// Ends every rank of the job now: writes `message` (one line) to stderr
  /// prefixed with this rank, then MPI_Abort(MPI_COMM_WORLD, code). Does not
  /// return.
  void (*abort)(const char *message, int32_t code);

  /// Leaves the job (MPI_Finalize) when init succeeded; idempotent.
  void (*finalize)(void);
} kiln_comm_api_t;

/// The one symbol a backend library exports.
typedef const kiln_comm_api_t *(*kiln_comm_get_api_fn)(void);
const kiln_comm_api_t *kiln_comm_get_api(void);

#ifdef __cplusplus
}
#endif

#endif // KILN_RT_COMM_COMMBACKEND_H
