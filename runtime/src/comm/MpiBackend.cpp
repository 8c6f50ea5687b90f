//===- MpiBackend.cpp - libkiln_comm_mpi.so ---------------------*- C++ -*-===//
//
// The communication backend of CommBackend.h over Open MPI 4.1 (MPI's C
// library only). One rank per process, MPI_COMM_WORLD; every collective runs
// on a private duplicate of it (MPI_Comm_dup), whose error handler is
// MPI_ERRORS_RETURN so a failed MPI call becomes an error message
// (MPI_Error_string) instead of killing the job.
//
// Collectives are nonblocking (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather)
// and waited for by polling MPI_Test: spinning (sched_yield) for the first
// millisecond, then sleeping between polls with an interval that doubles
// from 16 us up to 1 ms, until the request completes or the call's deadline
// passes. A request that misses its deadline cannot be cancelled portably:
// it is left pending, its buffers stay in use, and this backend refuses any
// later collective (the caller is expected to abort the job).
//
// 16-bit all-reduces widen to a float32 scratch buffer (exactly), sum in
// float32 and round each element once to nearest even (kernel_abi.h's
// scalar conversions, bit-identical to the runtime's kernels).
//
// Counts above what one MPI call takes (an int) are split into chunks of at
// most INT_MAX / 2 elements (all-reduce of f32), 2^24 elements (16-bit
// all-reduce: bounds the scratch buffer at 64 MiB) or INT_MAX / 2 bytes
// (broadcast, all-gather). KILN_COMM_MPI_MAX_CHUNK (a positive integer, read
// at init) lowers every one of these limits, so tests can exercise chunking
// with small buffers.
//
// Errors (the message names this rank and the collective):
//   KILN_RT_DEADLINE_EXCEEDED    the other ranks missed the call's deadline;
//   KILN_RT_INVALID_ARGUMENT     bad element type, count, root or buffer, or
//                                KILN_COMM_MPI_MAX_CHUNK;
//   KILN_RT_FAILED_PRECONDITION  no init (or after finalize), a call from
//                                another thread than init's when MPI gave
//                                only THREAD_FUNNELED (SERIALIZED is asked
//                                for: the serving engine's thread runs the
//                                steps), any collective after a timeout,
//                                MPI below THREAD_FUNNELED;
//   KILN_RT_RESOURCE_EXHAUSTED   the 16-bit scratch buffer;
//   KILN_RT_INTERNAL             an MPI call failed (MPI_Error_string).
// abort prints `kiln: rank R of N: <message>` (a message that already starts
// with "rank R of N: " is not prefixed twice; code 0 becomes 1). finalize
// calls MPI_Finalize only when this library initialized MPI: a host program
// that initialized it finalizes it.
//
//===----------------------------------------------------------------------===//
#include "comm/CommBackend.h"

#include "kiln_rt/api.h"
#include "kiln_rt/kernel_abi.h"

// MPI's C library only: mpi.h would otherwise pull in the C++ bindings
// (libmpi_cxx), whose symbols this library does not link.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <climits>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr int64_t kMaxF32Chunk = INT_MAX / 2;
constexpr int64_t kMaxWideChunk = int64_t(1) << 24;
constexpr int64_t kMaxByteChunk = INT_MAX / 2;
constexpr int64_t kSpinNs = 1000000;     // poll without sleeping this long
constexpr int64_t kFirstSleepNs = 16000; // then sleep 16 us, 32 us, ...
constexpr int64_t kMaxSleepNs = 1000000; // ... up to 1 ms between polls

/// Process-wide state: set by init, read by every collective.
struct State {
  bool joined = false;          // init succeeded
  bool weInitialized = false;   // this library called MPI_Init_thread
  bool finalized = false;       // finalize ran
  bool anyThread = false;       // MPI provides SERIALIZED or MULTIPLE
  pthread_t initThread{};
  int32_t rank = -1, size = 0;
  MPI_Comm comm = MPI_COMM_NULL;
  // The tensor-parallel group of this rank's pipeline stage (set_tp_group;
  // the plan's all-reduces and all-gathers): `comm` itself until then.
  MPI_Comm tpComm = MPI_COMM_NULL;
  int32_t tpSize = 0;
  // Liveness pings between waiting ranks (servicePings, unresponsive):
  // point-to-point on a communicator of their own, never mixed with the
  // collectives.
  MPI_Comm probeComm = MPI_COMM_NULL;
  int64_t maxChunk = INT64_MAX; // KILN_COMM_MPI_MAX_CHUNK
  // A collective that timed out is still pending: its message, refusing
  // every later collective, and no finalize (it would wait for it).
  bool broken = false;
  std::string brokenBecause;
  // float32 scratch of the 16-bit all-reduces, grown on demand.
  float *scratch = nullptr;
  int64_t scratchElems = 0;
};
State g;

int32_t setError(kiln_comm_error_t *err, int32_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int32_t setError(kiln_comm_error_t *err, int32_t code, const char *fmt, ...) {
  if (err) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
  }
  return code;
}

/// printf into a std::string (no std::to_string: its template statics
/// would be exported as unique symbols despite -fvisibility=hidden).
std::string format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  return text;
}

/// "rank R of N" for messages (before init: "rank ?").
std::string rankTag() {
  if (!g.joined)
    return "rank ?";
  return format("rank %d of %d", g.rank, g.size);
}

std::string mpiErrorString(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS || len <= 0)
    return format("MPI error %d", code);
  return std::string(text, static_cast<size_t>(len));
}

/// A failed MPI call in collective `desc`: KILN_RT_INTERNAL with MPI's text.
int32_t mpiFailure(kiln_comm_error_t *err, const char *call,
                   const std::string &desc, int code) {
  return setError(err, KILN_RT_INTERNAL, "%s: %s: %s failed: %s",
                  rankTag().c_str(), desc.c_str(), call,
                  mpiErrorString(code).c_str());
}

int64_t nowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const char *elemName(int32_t elem) {
  switch (elem) {
  case KILN_ELEM_F32:
    return "f32";
  case KILN_ELEM_F16:
    return "f16";
  case KILN_ELEM_BF16:
    return "bf16";
  default:
    return "?";
  }
}

const char *nameOr(const char *what) { return what && *what ? what : "?"; }

/// Checks what every collective needs: init succeeded, no earlier timeout,
/// the init thread (unless MPI allows any).
int32_t checkUsable(kiln_comm_error_t *err, const std::string &desc) {
  if (!g.joined || g.finalized)
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "%s: %s: the MPI backend is %s", rankTag().c_str(),
                    desc.c_str(),
                    g.finalized ? "finalized" : "not initialized (call init)");
  if (g.broken)
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "%s: %s refused: an earlier collective is still pending "
                    "(%s); the job must be aborted",
                    rankTag().c_str(), desc.c_str(), g.brokenBecause.c_str());
  if (!g.anyThread && !pthread_equal(pthread_self(), g.initThread))
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "%s: %s called from a thread other than the one that "
                    "called init (MPI_THREAD_FUNNELED)",
                    rankTag().c_str(), desc.c_str());
  return 0;
}

constexpr int kPingTag = 0x4b50; // "are you waiting?"
constexpr int kPongTag = 0x4b51; // "yes"

/// Answers every pending ping: a rank that polls in waitFor (in a
/// collective, or waiting for rank 0's next command) is alive.
void servicePings() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPingTag, g.probeComm, &flag, &st) !=
            MPI_SUCCESS ||
        !flag)
      return;
    int32_t payload = 0;
    MPI_Recv(&payload, 1, MPI_INT32_T, st.MPI_SOURCE, kPingTag, g.probeComm,
             MPI_STATUS_IGNORE);
    MPI_Request req;
    if (MPI_Isend(&g.rank, 1, MPI_INT32_T, st.MPI_SOURCE, kPongTag,
                  g.probeComm, &req) == MPI_SUCCESS)
      MPI_Request_free(&req);
  }
}

/// After a timeout: pings every other rank and waits up to `waitMs` for
/// the answers. Returns the ranks that did not answer (hung, stopped, or
/// busy outside Kiln's collectives for that long), as "1, 3".
std::string unresponsive(int64_t waitMs) {
  static const int32_t ping = 1;
  std::vector<char> answered(size_t(g.size), 0);
  answered[size_t(g.rank)] = 1;
  for (int32_t r = 0; r < g.size; ++r) {
    if (r == g.rank)
      continue;
    MPI_Request req;
    if (MPI_Isend(&ping, 1, MPI_INT32_T, r, kPingTag, g.probeComm, &req) ==
        MPI_SUCCESS)
      MPI_Request_free(&req);
  }
  const int64_t end = nowNs() + waitMs * 1000000;
  int left = g.size - 1;
  while (left > 0 && nowNs() < end) {
    servicePings(); // the other waiting ranks ask too
    int flag = 0;
    MPI_Status st;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kPongTag, g.probeComm, &flag, &st) !=
        MPI_SUCCESS)
      break;
    if (!flag) {
      timespec ts{0, 1000000};
      nanosleep(&ts, nullptr);
      continue;
    }
    int32_t from = -1;
    MPI_Recv(&from, 1, MPI_INT32_T, st.MPI_SOURCE, kPongTag, g.probeComm,
             MPI_STATUS_IGNORE);
    if (!answered[size_t(st.MPI_SOURCE)]) {
      answered[size_t(st.MPI_SOURCE)] = 1;
      --left;
    }
  }
  // (snprintf, not std::to_string: its digit table would be a unique
  // symbol exported from this library.)
  std::string out;
  for (int32_t r = 0; r < g.size; ++r)
    if (!answered[size_t(r)]) {
      char num[16];
      std::snprintf(num, sizeof(num), "%s%d", out.empty() ? "" : ", ", r);
      out += num;
    }
  return out;
}

/// Waits for `req` to complete, polling MPI_Test (see the file comment);
/// `deadlineNs` (CLOCK_MONOTONIC) <= 0: no deadline. On a timeout the
/// request is left pending and the backend refuses later collectives.
int32_t waitFor(MPI_Request *req, int64_t deadlineNs, int64_t timeoutMs,
                const char *call, const std::string &desc,
                kiln_comm_error_t *err) {
  const int64_t startNs = nowNs();
  int64_t sleepNs = kFirstSleepNs;
  for (;;) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, call, desc, rc);
    if (done)
      return 0;
    int64_t now = nowNs();
    if (now - startNs >= kSpinNs)
      servicePings();
    if (deadlineNs > 0 && now >= deadlineNs) {
      g.broken = true;
      g.brokenBecause = desc + " timed out";
      // Still in use by the pending request: never reuse or free it.
      g.scratch = nullptr;
      g.scratchElems = 0;
      // Which rank is missing: the others are polling too and answer.
      const std::string silent = unresponsive(1000);
      const std::string who =
          silent.empty()
              ? std::string("every rank answers a ping: they are slower "
                            "than the deadline allows (raise it), or one "
                            "waits in another collective")
              : (silent.find(',') == std::string::npos ? "rank " : "ranks ") +
                    silent + " did not answer within 1 s (hung or stopped)";
      return setError(
          err, KILN_RT_DEADLINE_EXCEEDED,
          "%s: %s timed out after %.1f s waiting for the other ranks: %s "
          "(KILN_COMM_TIMEOUT_S sets the limit)",
          rankTag().c_str(), desc.c_str(), double(timeoutMs) / 1000.0,
          who.c_str());
    }
    if (now - startNs < kSpinNs) {
      sched_yield();
      continue;
    }
    int64_t nap = sleepNs;
    if (deadlineNs > 0 && deadlineNs - now < nap)
      nap = deadlineNs - now;
    timespec ts{time_t(nap / 1000000000), long(nap % 1000000000)};
    nanosleep(&ts, nullptr);
    sleepNs = sleepNs * 2 < kMaxSleepNs ? sleepNs * 2 : kMaxSleepNs;
  }
}

/// Deadline in CLOCK_MONOTONIC ns of a call started at `startNs`, or 0.
int64_t deadlineOf(int64_t startNs, int64_t timeoutMs) {
  if (timeoutMs <= 0)
    return 0;
  if (timeoutMs > (INT64_MAX - startNs) / 1000000)
    return 0; // beyond any practical wait: unbounded
  return startNs + timeoutMs * 1000000;
}

int32_t commInit(int32_t *rank, int32_t *size, kiln_comm_error_t *err) {
  if (g.joined && !g.finalized) {
    if (rank)
      *rank = g.rank;
    if (size)
      *size = g.size;
    return 0;
  }
  if (g.finalized)
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "MPI backend: init after finalize (MPI cannot restart)");
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "MPI backend: MPI was already finalized in this process");
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (rc != MPI_SUCCESS)
      return setError(err, KILN_RT_INTERNAL,
                      "MPI backend: MPI_Init_thread failed: %s",
                      mpiErrorString(rc).c_str());
    g.weInitialized = true;
  } else {
    MPI_Query_thread(&provided);
  }
  int isMain = 0;
  MPI_Is_thread_main(&isMain);
  if (provided < MPI_THREAD_FUNNELED ||
      (provided == MPI_THREAD_FUNNELED && !isMain))
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "MPI backend: MPI provides thread level %d, but the "
                    "runtime needs MPI_THREAD_FUNNELED (%d) from the thread "
                    "that initialized MPI",
                    provided, MPI_THREAD_FUNNELED);
  g.anyThread = provided >= MPI_THREAD_SERIALIZED;

  int r = 0, n = 0;
  int rc = MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (rc != MPI_SUCCESS)
    return setError(err, KILN_RT_INTERNAL,
                    "MPI backend: rank or size of MPI_COMM_WORLD: %s",
                    mpiErrorString(rc).c_str());
  MPI_Comm comm = MPI_COMM_NULL;
  rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (rc != MPI_SUCCESS)
    return setError(err, KILN_RT_INTERNAL,
                    "MPI backend: rank %d of %d: MPI_Comm_dup failed: %s", r,
                    n, mpiErrorString(rc).c_str());
  rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return setError(err, KILN_RT_INTERNAL,
                    "MPI backend: rank %d of %d: MPI_Comm_set_errhandler "
                    "failed: %s",
                    r, n, mpiErrorString(rc).c_str());
  }
  if (const char *chunk = std::getenv("KILN_COMM_MPI_MAX_CHUNK")) {
    char *end = nullptr;
    long long v = std::strtoll(chunk, &end, 10);
    if (end == chunk || *end != '\0' || v <= 0) {
      MPI_Comm_free(&comm);
      return setError(err, KILN_RT_INVALID_ARGUMENT,
                      "MPI backend: KILN_COMM_MPI_MAX_CHUNK='%s' is not a "
                      "positive integer",
                      chunk);
    }
    g.maxChunk = v;
  }
  MPI_Comm probe = MPI_COMM_NULL;
  rc = MPI_Comm_dup(MPI_COMM_WORLD, &probe);
  if (rc == MPI_SUCCESS)
    rc = MPI_Comm_set_errhandler(probe, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) {
    MPI_Comm_free(&comm);
    return setError(err, KILN_RT_INTERNAL,
                    "MPI backend: rank %d of %d: the liveness communicator: "
                    "%s",
                    r, n, mpiErrorString(rc).c_str());
  }
  g.probeComm = probe;
  g.comm = comm;
  g.tpComm = comm;
  g.rank = r;
  g.size = n;
  g.initThread = pthread_self();
  g.joined = true;
  if (rank)
    *rank = r;
  if (size)
    *size = n;
  return 0;
}

int64_t chunkLimit(int64_t natural) {
  return g.maxChunk < natural ? g.maxChunk : natural;
}

/// KILN_ELEM_F32, _F16 or _BF16, else an error.
int32_t checkElem(int32_t elem, const std::string &desc,
                  kiln_comm_error_t *err) {
  if (elem == KILN_ELEM_F32 || elem == KILN_ELEM_F16 || elem == KILN_ELEM_BF16)
    return 0;
  return setError(err, KILN_RT_INVALID_ARGUMENT,
                  "%s: %s: element type %d is not KILN_ELEM_F32, _F16 or _BF16",
                  rankTag().c_str(), desc.c_str(), elem);
}

/// Grows the float32 scratch to `need` elements.
int32_t growScratch(int64_t need, const std::string &desc,
                    kiln_comm_error_t *err) {
  if (need <= g.scratchElems)
    return 0;
  float *grown = static_cast<float *>(std::malloc(size_t(need) * sizeof(float)));
  if (!grown)
    return setError(err, KILN_RT_RESOURCE_EXHAUSTED,
                    "%s: %s: cannot allocate %lld bytes of float32 scratch",
                    rankTag().c_str(), desc.c_str(),
                    (long long)(need * int64_t(sizeof(float))));
  std::free(g.scratch);
  g.scratch = grown;
  g.scratchElems = need;
  return 0;
}

int32_t allReduceSum(void *buf, int64_t count, int32_t elem, const char *what,
                     int64_t timeoutMs, kiln_comm_error_t *err) {
  std::string desc = format("all-reduce '%s' (%lld %s)", nameOr(what),
                            (long long)count, elemName(elem));
  if (int32_t rc = checkUsable(err, desc))
    return rc;
  if (int32_t rc = checkElem(elem, desc, err))
    return rc;
  if (count < 0 || (count > 0 && !buf))
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: bad buffer (count %lld, buf %p)",
                    rankTag().c_str(), desc.c_str(), (long long)count, buf);
  int64_t startNs = nowNs();
  int64_t deadlineNs = deadlineOf(startNs, timeoutMs);

  if (elem == KILN_ELEM_F32) {
    float *data = static_cast<float *>(buf);
    int64_t step = chunkLimit(kMaxF32Chunk);
    for (int64_t off = 0; off < count; off += step) {
      int n = int(count - off < step ? count - off : step);
      MPI_Request req;
      int rc = MPI_Iallreduce(MPI_IN_PLACE, data + off, n, MPI_FLOAT, MPI_SUM,
                              g.tpComm, &req);
      if (rc != MPI_SUCCESS)
        return mpiFailure(err, "MPI_Iallreduce", desc, rc);
      if (int32_t w = waitFor(&req, deadlineNs, timeoutMs, "MPI_Iallreduce",
                              desc, err))
        return w;
    }
    return 0;
  }

  // 16-bit: widen a chunk exactly, sum in float32, round back once.
  uint16_t *data = static_cast<uint16_t *>(buf);
  int64_t step = chunkLimit(kMaxWideChunk);
  if (int32_t rc = growScratch(count < step ? count : step, desc, err))
    return rc;
  float *wide = g.scratch;
  for (int64_t off = 0; off < count; off += step) {
    int n = int(count - off < step ? count - off : step);
    const uint16_t *src = data + off;
    if (elem == KILN_ELEM_F16) {
      for (int i = 0; i < n; ++i)
        wide[i] = kiln_f16_to_float(src[i]);
    } else {
      for (int i = 0; i < n; ++i)
        wide[i] = kiln_bf16_to_float(src[i]);
    }
    MPI_Request req;
    int rc = MPI_Iallreduce(MPI_IN_PLACE, wide, n, MPI_FLOAT, MPI_SUM, g.tpComm,
                            &req);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Iallreduce", desc, rc);
    if (int32_t w = waitFor(&req, deadlineNs, timeoutMs, "MPI_Iallreduce",
                            desc, err))
      return w;
    uint16_t *dst = data + off;
    if (elem == KILN_ELEM_F16) {
      for (int i = 0; i < n; ++i)
        dst[i] = kiln_float_to_f16(wide[i]);
    } else {
      for (int i = 0; i < n; ++i)
        dst[i] = kiln_float_to_bf16(wide[i]);
    }
  }
  return 0;
}

int32_t broadcast(void *buf, int64_t bytes, int32_t root, const char *what,
                  int64_t timeoutMs, kiln_comm_error_t *err) {
  std::string desc = format("broadcast '%s' (%lld bytes from rank %d)",
                            nameOr(what), (long long)bytes, root);
  if (int32_t rc = checkUsable(err, desc))
    return rc;
  if (root < 0 || root >= g.size)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: root %d is not a rank of the job",
                    rankTag().c_str(), desc.c_str(), root);
  if (bytes < 0 || (bytes > 0 && !buf))
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: bad buffer (%lld bytes, buf %p)",
                    rankTag().c_str(), desc.c_str(), (long long)bytes, buf);
  int64_t startNs = nowNs();
  int64_t deadlineNs = deadlineOf(startNs, timeoutMs);
  char *data = static_cast<char *>(buf);
  int64_t step = chunkLimit(kMaxByteChunk);
  for (int64_t off = 0; off < bytes; off += step) {
    int n = int(bytes - off < step ? bytes - off : step);
    MPI_Request req;
    int rc = MPI_Ibcast(data + off, n, MPI_BYTE, root, g.comm, &req);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Ibcast", desc, rc);
    if (int32_t w =
            waitFor(&req, deadlineNs, timeoutMs, "MPI_Ibcast", desc, err))
      return w;
  }
  return 0;
}

int32_t allGather(const void *send, void *recv, int64_t bytes, int32_t scope,
                  const char *what, int64_t timeoutMs,
                  kiln_comm_error_t *err) {
  MPI_Comm comm = scope == KILN_COMM_SCOPE_TP ? g.tpComm : g.comm;
  std::string desc = format("all-gather '%s' (%lld bytes per rank)",
                            nameOr(what), (long long)bytes);
  if (int32_t rc = checkUsable(err, desc))
    return rc;
  if (bytes < 0 || (bytes > 0 && (!send || !recv)))
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: bad buffers (%lld bytes, send %p, recv %p)",
                    rankTag().c_str(), desc.c_str(), (long long)bytes, send,
                    recv);
  int64_t startNs = nowNs();
  int64_t deadlineNs = deadlineOf(startNs, timeoutMs);
  const char *src = static_cast<const char *>(send);
  char *dst = static_cast<char *>(recv);
  int64_t step = chunkLimit(kMaxByteChunk);
  if (step >= bytes) {
    if (bytes == 0)
      return 0;
    MPI_Request req;
    int rc = MPI_Iallgather(src, int(bytes), MPI_BYTE, dst, int(bytes),
                            MPI_BYTE, comm, &req);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Iallgather", desc, rc);
    return waitFor(&req, deadlineNs, timeoutMs, "MPI_Iallgather", desc,
                   err);
  }
  // Chunks: rank r's piece [off, off + n) lands at r * bytes + off, i.e. a
  // receive type of n bytes whose extent is `bytes` (every rank's block).
  for (int64_t off = 0; off < bytes; off += step) {
    int n = int(bytes - off < step ? bytes - off : step);
    MPI_Datatype block, strided;
    int rc = MPI_Type_contiguous(n, MPI_BYTE, &block);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Type_contiguous", desc, rc);
    rc = MPI_Type_create_resized(block, 0, MPI_Aint(bytes), &strided);
    MPI_Type_free(&block);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Type_create_resized", desc, rc);
    rc = MPI_Type_commit(&strided);
    if (rc != MPI_SUCCESS) {
      MPI_Type_free(&strided);
      return mpiFailure(err, "MPI_Type_commit", desc, rc);
    }
    MPI_Request req;
    rc = MPI_Iallgather(src + off, n, MPI_BYTE, dst + off, 1, strided, comm,
                        &req);
    // Freeing a type a pending operation uses is allowed (MPI 4.1 3.3.4).
    MPI_Type_free(&strided);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Iallgather", desc, rc);
    if (int32_t w = waitFor(&req, deadlineNs, timeoutMs, "MPI_Iallgather",
                            desc, err))
      return w;
  }
  return 0;
}

/// The group's per-rank counts as MPI's int counts and displacements; an
/// error when a count or the total does not fit an int (one step's
/// activations: far below 2^31 elements).
/// (Plain arrays: a std::vector<int> instantiation would be exported from
/// the library beside kiln_comm_get_api.)
struct MpiCounts {
  std::unique_ptr<int[]> counts, displs;
};
int32_t mpiCounts(const int64_t *counts, MPI_Comm comm, MpiCounts &mc,
                  int64_t &total, const std::string &desc,
                  kiln_comm_error_t *err) {
  int ranks = 0;
  MPI_Comm_size(comm, &ranks);
  mc.counts.reset(new int[size_t(ranks)]());
  mc.displs.reset(new int[size_t(ranks)]());
  int *out = mc.counts.get(), *displs = mc.displs.get();
  total = 0;
  for (int r = 0; r < ranks; ++r) {
    if (counts[r] < 0 || total + counts[r] > INT32_MAX)
      return setError(err, KILN_RT_INVALID_ARGUMENT,
                      "%s: %s: rank %d's count %lld is negative or the "
                      "total exceeds 2^31 - 1",
                      rankTag().c_str(), desc.c_str(), r,
                      (long long)counts[r]);
    displs[r] = int(total);
    out[r] = int(counts[r]);
    total += counts[r];
  }
  return 0;
}

/// The common start of the per-rank-count collectives: usable, non-null
/// buffers, the counts as MPI's, this rank's place in the TP group.
int32_t startVectorCollective(const void *send, const void *recv,
                              const int64_t *counts, const std::string &desc,
                              MpiCounts &n, int64_t &total, int &me,
                              kiln_comm_error_t *err) {
  if (int32_t rc = checkUsable(err, desc))
    return rc;
  if (!counts || !send || !recv)
    return setError(err, KILN_RT_INVALID_ARGUMENT, "%s: %s: null argument",
                    rankTag().c_str(), desc.c_str());
  if (int32_t rc = mpiCounts(counts, g.tpComm, n, total, desc, err))
    return rc;
  MPI_Comm_rank(g.tpComm, &me);
  return 0;
}

int32_t reduceScatterSum(const void *send, void *recv, const int64_t *counts,
                         int32_t elem, const char *what, int64_t timeoutMs,
                         kiln_comm_error_t *err) {
  std::string desc = format("reduce-scatter '%s' (%s)", nameOr(what),
                            elemName(elem));
  if (int32_t rc = checkElem(elem, desc, err))
    return rc;
  MpiCounts n;
  int64_t total = 0;
  int me = 0;
  if (int32_t rc = startVectorCollective(send, recv, counts, desc, n, total,
                                         me, err))
    return rc;
  const int64_t startNs = nowNs();
  const int64_t deadlineNs = deadlineOf(startNs, timeoutMs);
  MPI_Request req;
  if (elem == KILN_ELEM_F32) {
    int rc = MPI_Ireduce_scatter(send, recv, n.counts.get(), MPI_FLOAT, MPI_SUM,
                                 g.tpComm, &req);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, "MPI_Ireduce_scatter", desc, rc);
    return waitFor(&req, deadlineNs, timeoutMs, "MPI_Ireduce_scatter", desc,
                   err);
  }
  // 16-bit: widen every element exactly, reduce in float32 in place (the
  // rank's block lands at the front), round its block back once.
  if (int32_t rc = growScratch(total, desc, err))
    return rc;
  float *wide = g.scratch;
  const uint16_t *src = static_cast<const uint16_t *>(send);
  for (int64_t i = 0; i < total; ++i)
    wide[i] = elem == KILN_ELEM_F16 ? kiln_f16_to_float(src[i])
                                    : kiln_bf16_to_float(src[i]);
  int rc = MPI_Ireduce_scatter(MPI_IN_PLACE, wide, n.counts.get(), MPI_FLOAT,
                               MPI_SUM, g.tpComm, &req);
  if (rc != MPI_SUCCESS)
    return mpiFailure(err, "MPI_Ireduce_scatter", desc, rc);
  if (int32_t w = waitFor(&req, deadlineNs, timeoutMs, "MPI_Ireduce_scatter",
                          desc, err))
    return w;
  uint16_t *dst = static_cast<uint16_t *>(recv);
  for (int i = 0; i < n.counts[size_t(me)]; ++i)
    dst[i] = elem == KILN_ELEM_F16 ? kiln_float_to_f16(wide[i])
                                   : kiln_float_to_bf16(wide[i]);
  return 0;
}

int32_t allGatherV(const void *send, void *recv, const int64_t *bytes,
                   const char *what, int64_t timeoutMs,
                   kiln_comm_error_t *err) {
  std::string desc = format("all-gather of rows '%s'", nameOr(what));
  MpiCounts n;
  int64_t total = 0;
  int me = 0;
  if (int32_t rc = startVectorCollective(send, recv, bytes, desc, n, total, me,
                                         err))
    return rc;
  const int64_t startNs = nowNs();
  const int64_t deadlineNs = deadlineOf(startNs, timeoutMs);
  MPI_Request req;
  int rc = MPI_Iallgatherv(send, n.counts[size_t(me)], MPI_BYTE, recv,
                           n.counts.get(), n.displs.get(), MPI_BYTE, g.tpComm,
                           &req);
  if (rc != MPI_SUCCESS)
    return mpiFailure(err, "MPI_Iallgatherv", desc, rc);
  return waitFor(&req, deadlineNs, timeoutMs, "MPI_Iallgatherv", desc, err);
}

int32_t setTpGroup(int32_t tp, kiln_comm_error_t *err) {
  std::string desc = format("tensor-parallel groups of %d ranks", tp);
  if (int32_t rc = checkUsable(err, desc))
    return rc;
  if (tp < 1 || g.size % tp != 0)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: %d ranks do not split into them",
                    rankTag().c_str(), desc.c_str(), g.size);
  if (g.tpSize == tp)
    return 0;
  if (g.tpSize != 0)
    return setError(err, KILN_RT_FAILED_PRECONDITION,
                    "%s: %s: the groups are already of %d ranks",
                    rankTag().c_str(), desc.c_str(), g.tpSize);
  if (tp == g.size) {
    g.tpSize = tp;
    return 0;
  }
  // Stage s holds ranks [s * tp, (s + 1) * tp); tp rank = rank % tp.
  MPI_Comm sub = MPI_COMM_NULL;
  int rc = MPI_Comm_split(g.comm, g.rank / tp, g.rank % tp, &sub);
  if (rc != MPI_SUCCESS)
    return mpiFailure(err, "MPI_Comm_split", desc, rc);
  MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
  g.tpComm = sub;
  g.tpSize = tp;
  return 0;
}

/// Point-to-point transfer of bytes to (send) or from (!send) `peer`, in
/// chunks, each polled against the deadline like a collective.
int32_t pointToPoint(bool send, void *buf, int64_t bytes, int32_t peer,
                     const char *what, int64_t timeoutMs,
                     kiln_comm_error_t *err) {
  std::string desc =
      format("%s '%s' (%lld bytes %s rank %d)", send ? "send" : "receive",
             nameOr(what), (long long)bytes, send ? "to" : "from", peer);
  if (int32_t rc = checkUsable(err, desc))
    return rc;
  if (peer < 0 || peer >= g.size || peer == g.rank)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: rank %d is not another rank of the job",
                    rankTag().c_str(), desc.c_str(), peer);
  if (bytes < 0 || (bytes > 0 && !buf))
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "%s: %s: bad buffer (%lld bytes, buf %p)",
                    rankTag().c_str(), desc.c_str(), (long long)bytes, buf);
  int64_t deadlineNs = deadlineOf(nowNs(), timeoutMs);
  char *data = static_cast<char *>(buf);
  int64_t step = chunkLimit(kMaxByteChunk);
  for (int64_t off = 0; off < bytes; off += step) {
    int n = int(bytes - off < step ? bytes - off : step);
    MPI_Request req;
    int rc = send ? MPI_Isend(data + off, n, MPI_BYTE, peer, 0, g.comm, &req)
                  : MPI_Irecv(data + off, n, MPI_BYTE, peer, 0, g.comm, &req);
    if (rc != MPI_SUCCESS)
      return mpiFailure(err, send ? "MPI_Isend" : "MPI_Irecv", desc, rc);
    if (int32_t w = waitFor(&req, deadlineNs, timeoutMs,
                            send ? "MPI_Isend" : "MPI_Irecv", desc, err))
      return w;
  }
  return 0;
}

int32_t sendBytes(const void *buf, int64_t bytes, int32_t dest,
                  const char *what, int64_t timeoutMs,
                  kiln_comm_error_t *err) {
  return pointToPoint(true, const_cast<void *>(buf), bytes, dest, what,
                      timeoutMs, err);
}

int32_t recvBytes(void *buf, int64_t bytes, int32_t source, const char *what,
                  int64_t timeoutMs, kiln_comm_error_t *err) {
  return pointToPoint(false, buf, bytes, source, what, timeoutMs, err);
}

[[noreturn]] void commAbort(const char *message, int32_t code) {
  if (code == 0)
    code = 1; // an abort never reports success
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  bool live = initialized && !finalized;
  int r = g.rank, n = g.size;
  if (live && !g.joined) {
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
  }
  std::string tag = r >= 0 ? format("rank %d of %d", r, n) : std::string();
  std::string text = message ? message : "aborted";
  // Messages of this backend already start with "rank R of N: ".
  if (!tag.empty() && text.compare(0, tag.size() + 2, tag + ": ") == 0)
    text.erase(0, tag.size() + 2);
  for (char &c : text)
    if (c == '\n' || c == '\r')
      c = ' ';
  std::string line =
      "kiln: " + (tag.empty() ? std::string() : tag + ": ") + text + "\n";
  std::fflush(stdout);
  std::fputs(line.c_str(), stderr);
  std::fflush(stderr);
  if (live)
    MPI_Abort(MPI_COMM_WORLD, code);
  _exit(code);
}

void commFinalize(void) {
  if (!g.joined || g.finalized)
    return;
  g.finalized = true;
  // A pending (timed-out) collective would make both calls wait for it.
  if (g.broken)
    return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  if (g.tpComm != g.comm && g.tpComm != MPI_COMM_NULL)
    MPI_Comm_free(&g.tpComm);
  MPI_Comm_free(&g.comm);
  if (g.probeComm != MPI_COMM_NULL)
    MPI_Comm_free(&g.probeComm);
  std::free(g.scratch);
  g.scratch = nullptr;
  g.scratchElems = 0;
  // MPI initialized by the host program is the host's to finalize.
  if (g.weInitialized)
    MPI_Finalize();
}

const kiln_comm_api_t kApi = {
    KILN_COMM_INTERFACE_VERSION,
    sizeof(kiln_comm_api_t),
    "mpi",
    commInit,
    allReduceSum,
    broadcast,
    allGather,
    setTpGroup,
    sendBytes,
    recvBytes,
    reduceScatterSum,
    allGatherV,
    commAbort,
    commFinalize,
};

} // namespace

/// The backend's table (CommBackend.h); the library's only exported symbol.
extern "C" __attribute__((visibility("default"))) const kiln_comm_api_t *
kiln_comm_get_api(void) {
  return &kApi;
}
