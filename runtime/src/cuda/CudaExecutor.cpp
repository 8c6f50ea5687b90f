//===- CudaExecutor.cpp - libkiln_runtime_cuda.so -----------------*- C++ -*-===//
//
// The CUDA executor behind the C table of CudaExecutor.h. Host code only
// (compiled by the host compiler against the CUDA runtime API, linked with
// the shared libcudart); the kernels live in the artifact's model.so.
//
// Per model: device 0, weights copied once through two pinned 64 MiB staging
// buffers (host memcpy from the mmap overlaps the previous async upload), and
// a cuBLASLt handle from a dlopen()ed libcublasLt. Per session: one
// non-blocking stream and device buffers
//   io:     [0] int64 pos | [16] int32 tokens[max_prefill] | coin | token
//   arena, kv (zeroed), logits float[vocab], workspace
// with a pinned host mirror of `io`, so one H2D copy sets tokens and position.
// Prefill runs kiln_prefill eagerly per chunk; decode captures
// kiln_decode(ctx, 1, pos) once into a CUDA graph and replays it, with the
// token/position copy enqueued before (outside) the graph. Every step ends
// with a stream synchronize, ctx->status and cudaGetLastError checks.
//
// Per stepper (the serving engine's batched step): one stream, the paged KV
// pool (zeroed), arena, workspace, logits float[max_seqs, vocab] with a
// pinned mirror, and
//   io:     int64 seq_pos[max_seqs] | int32 tokens[max_tokens] |
//           int32 positions[max_tokens] | int32 tables[max_seqs, max_blocks]
// with a pinned host mirror: one H2D copy per step, kiln_step run eagerly,
// one D2H copy of the logits, one synchronize.
//
//===----------------------------------------------------------------------===//
#include "cuda/CudaExecutor.h"

#include "kiln_rt/api.h"

#include <cuda_runtime.h>
#ifdef KILN_HAVE_NCCL
#include <nccl.h>
#endif

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr uint64_t kAlign = 256;
constexpr uint64_t kStagingBytes = uint64_t(64) << 20;
constexpr uint64_t kPosOffset = 0;
constexpr uint64_t kTokensOffset = 16;

uint64_t alignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

const char *baseName(const char *path) {
  const char *slash = std::strrchr(path, '/');
  return slash ? slash + 1 : path;
}

int32_t setError(kiln_cudaexec_error_t *err, int32_t code, const char *fmt,
                 ...) __attribute__((format(printf, 3, 4)));
int32_t setError(kiln_cudaexec_error_t *err, int32_t code, const char *fmt,
                 ...) {
  if (err) {
    err->code = code;
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(err->message, sizeof(err->message), fmt, ap);
    va_end(ap);
  }
  return code;
}

int32_t codeOf(cudaError_t e) {
  return e == cudaErrorMemoryAllocation ? KILN_RT_RESOURCE_EXHAUSTED
                                        : KILN_RT_INTERNAL;
}

int32_t cudaFailure(kiln_cudaexec_error_t *err, cudaError_t e,
                    const char *call, const char *file, int line) {
  // Clear the non-sticky per-thread error so later calls start clean.
  (void)cudaGetLastError();
  return setError(err, codeOf(e), "%s failed at %s:%d: %s", call,
                  baseName(file), line, cudaGetErrorString(e));
}

} // namespace

/// Checks a CUDA runtime call; on failure fills `err` and returns its code.
#define KILN_CUDA_CHECK(call)                                                  \
  do {                                                                         \
    cudaError_t kilnCudaErr_ = (call);                                         \
    if (kilnCudaErr_ != cudaSuccess)                                           \
      return cudaFailure(err, kilnCudaErr_, #call, __FILE__, __LINE__);        \
  } while (0)

#define KILN_RETURN_IF_FAILED(expr)                                            \
  do {                                                                         \
    int32_t kilnCode_ = (expr);                                                \
    if (kilnCode_ != 0)                                                        \
      return kilnCode_;                                                        \
  } while (0)

using CublasLtCreateFn = int (*)(void **handle);
using CublasLtDestroyFn = int (*)(void *handle);

struct kiln_cudaexec_model_s {
  kiln_cudaexec_model_desc_t desc{};
  int device = 0;
  void *nccl = nullptr; ///< ncclComm_t of a tensor-parallel rank's group
  /// ncclComm_t over every rank of a job with pipeline stages.
  void *ncclPipeline = nullptr;
  int32_t smCount = 0;
  uint8_t *dWeights = nullptr;
  uint64_t workspaceBytes = 0;
  void *cublasLtLibrary = nullptr;
  void *cublasLt = nullptr;
  CublasLtDestroyFn cublasLtDestroy = nullptr;

  ~kiln_cudaexec_model_s() {
#ifdef KILN_HAVE_NCCL
    if (nccl)
      ncclCommDestroy(static_cast<ncclComm_t>(nccl));
    if (ncclPipeline)
      ncclCommDestroy(static_cast<ncclComm_t>(ncclPipeline));
#endif
    if (cublasLt && cublasLtDestroy)
      cublasLtDestroy(cublasLt);
    if (dWeights)
      cudaFree(dWeights);
    if (cublasLtLibrary)
      dlclose(cublasLtLibrary);
  }
};

/// What a session and a stepper both own: a non-blocking stream, the I/O
/// buffer of token ids and positions with its pinned host mirror, the
/// activation arena, the workspace, and the logits with their pinned
/// mirror (allocateRunBuffers); the context that points at them.
struct RunBuffers {
  kiln_cudaexec_model_s *model = nullptr;
  cudaStream_t stream = nullptr;
  uint64_t ioBytes = 0;
  uint8_t *dIo = nullptr, *hIo = nullptr;
  uint8_t *dArena = nullptr, *dWorkspace = nullptr;
  float *dLogits = nullptr, *hLogits = nullptr;
  kiln_cuda_ctx ctx{};

  ~RunBuffers() {
    if (stream)
      cudaStreamSynchronize(stream);
    for (void *p :
         {(void *)dIo, (void *)dArena, (void *)dWorkspace, (void *)dLogits})
      if (p)
        cudaFree(p);
    if (hIo)
      cudaFreeHost(hIo);
    if (hLogits)
      cudaFreeHost(hLogits);
    if (stream)
      cudaStreamDestroy(stream);
    (void)cudaGetLastError();
  }
};

struct kiln_cudaexec_session_s : RunBuffers {
  cudaEvent_t ioFree = nullptr; ///< recorded after each H2D copy from hIo
  bool ioPending = false;
  uint64_t coinOffset = 0, tokenOffset = 0;
  uint8_t *dKv = nullptr;
  bool logitsOnHost = false;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t graphExec = nullptr;
  bool useGraph = true;
  /// The verify step's logits, float[max_prefill_tokens, vocab] (allocated
  /// at the first verify).
  float *dVerifyLogits = nullptr;

  ~kiln_cudaexec_session_s() {
    if (stream)
      cudaStreamSynchronize(stream);
    if (dVerifyLogits)
      cudaFree(dVerifyLogits);
    if (graphExec)
      cudaGraphExecDestroy(graphExec);
    if (graph)
      cudaGraphDestroy(graph);
    if (dKv)
      cudaFree(dKv);
    if (ioFree)
      cudaEventDestroy(ioFree);
    (void)cudaGetLastError();
  } // then ~RunBuffers
};

struct kiln_cudaexec_stepper_s : RunBuffers {
  kiln_cudaexec_step_desc_t desc{};
  std::vector<kiln_cudaexec_layer_pool_t> layerPools;
  std::vector<kiln_cuda_paged_kv> pages; ///< host array, device pools
  uint8_t *dPool = nullptr;
  uint64_t seqPosOffset = 0, tokensOffset = 0, positionsOffset = 0,
           tablesOffset = 0;
  kiln_cuda_batch batch{};

  ~kiln_cudaexec_stepper_s() {
    if (stream)
      cudaStreamSynchronize(stream);
    if (dPool)
      cudaFree(dPool);
    (void)cudaGetLastError();
  } // then ~RunBuffers
};

namespace {

/// cudaMalloc rounded up to 256 bytes (allocations are 256-byte aligned).
template <typename T>
int32_t deviceAlloc(T **out, uint64_t bytes, const char *what,
                    kiln_cudaexec_error_t *err) {
  void *p = nullptr;
  uint64_t rounded = alignUp(std::max<uint64_t>(bytes, 1), kAlign);
  cudaError_t e = cudaMalloc(&p, rounded);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(err, codeOf(e),
                    "cudaMalloc of the %s (%llu bytes) failed at %s:%d: %s",
                    what, (unsigned long long)rounded, baseName(__FILE__),
                    __LINE__, cudaGetErrorString(e));
  }
  *out = static_cast<T *>(p);
  return 0;
}

/// A pinned staging buffer, freed on scope exit.
struct PinnedBuffer {
  void *p = nullptr;
  ~PinnedBuffer() {
    if (p)
      cudaFreeHost(p);
  }
};

int32_t uploadWeights(kiln_cudaexec_model_s &m, kiln_cudaexec_error_t *err) {
  const kiln_cudaexec_model_desc_t &d = m.desc;
  KILN_RETURN_IF_FAILED(deviceAlloc(&m.dWeights, d.weights_bytes, "weights", err));
  if (d.weights_bytes == 0)
    return 0;
  uint64_t chunk = std::min(kStagingBytes, d.weights_bytes);
  PinnedBuffer staging[2];
  struct Resources {
    cudaStream_t stream = nullptr;
    cudaEvent_t done[2] = {nullptr, nullptr};
    ~Resources() {
      if (stream)
        cudaStreamSynchronize(stream);
      for (cudaEvent_t e : done)
        if (e)
          cudaEventDestroy(e);
      if (stream)
        cudaStreamDestroy(stream);
    }
  } r;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  bool used[2] = {false, false};
  for (int b = 0; b < 2; ++b) {
    KILN_CUDA_CHECK(cudaHostAlloc(&staging[b].p, chunk, cudaHostAllocDefault));
    KILN_CUDA_CHECK(cudaEventCreateWithFlags(&r.done[b], cudaEventDisableTiming));
  }
  int b = 0;
  for (uint64_t off = 0; off < d.weights_bytes; off += chunk, b ^= 1) {
    uint64_t len = std::min(chunk, d.weights_bytes - off);
    if (used[b]) // the copy that last read this buffer must be finished
      KILN_CUDA_CHECK(cudaEventSynchronize(r.done[b]));
    std::memcpy(staging[b].p, d.weights + off, len);
    KILN_CUDA_CHECK(cudaMemcpyAsync(m.dWeights + off, staging[b].p, len,
                                    cudaMemcpyHostToDevice, r.stream));
    KILN_CUDA_CHECK(cudaEventRecord(r.done[b], r.stream));
    used[b] = true;
  }
  KILN_CUDA_CHECK(cudaStreamSynchronize(r.stream));
  return 0;
}

/// libcublasLt: model.so links it, so the soname usually resolves to the copy
/// already loaded; the toolkit's directory is the last resort.
int32_t createCublasLt(kiln_cudaexec_model_s &m, kiln_cudaexec_error_t *err) {
  const char *candidates[] = {"libcublasLt.so.13", "libcublasLt.so",
#ifdef KILN_CUDA_TOOLKIT_LIBRARY_DIR
                              KILN_CUDA_TOOLKIT_LIBRARY_DIR "/libcublasLt.so.13",
#endif
                              nullptr};
  std::string tried;
  for (const char **c = candidates; *c && !m.cublasLtLibrary; ++c) {
    dlerror();
    m.cublasLtLibrary = dlopen(*c, RTLD_NOW | RTLD_LOCAL);
    if (!m.cublasLtLibrary) {
      const char *e = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (e ? e : *c);
    }
  }
  if (!m.cublasLtLibrary)
    return setError(err, KILN_RT_NOT_FOUND,
                    "cannot load cuBLASLt (libcublasLt.so.13): %s", tried.c_str());
  auto create = reinterpret_cast<CublasLtCreateFn>(
      dlsym(m.cublasLtLibrary, "cublasLtCreate"));
  m.cublasLtDestroy = reinterpret_cast<CublasLtDestroyFn>(
      dlsym(m.cublasLtLibrary, "cublasLtDestroy"));
  if (!create || !m.cublasLtDestroy)
    return setError(err, KILN_RT_NOT_FOUND,
                    "libcublasLt has no cublasLtCreate/cublasLtDestroy");
  int status = create(&m.cublasLt);
  if (status != 0 || !m.cublasLt) {
    m.cublasLt = nullptr;
    return setError(err, KILN_RT_INTERNAL,
                    "cublasLtCreate failed at %s:%d: cublasStatus_t %d",
                    baseName(__FILE__), __LINE__, status);
  }
  return 0;
}

/// After emitted host code ran (eagerly or under capture): its own error
/// report first, then launch errors it did not check.
int32_t checkModelCall(kiln_cuda_ctx &ctx, const char *what,
                       kiln_cudaexec_error_t *err) {
  if (ctx.status != 0) {
    ctx.error[sizeof(ctx.error) - 1] = '\0';
    (void)cudaGetLastError();
    return setError(err, KILN_RT_INTERNAL, "%s: %s (status %d)", what,
                    ctx.error[0] ? ctx.error : "emitted code reported an error",
                    ctx.status);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess)
    return setError(err, codeOf(e), "%s: kernel launch failed: %s", what,
                    cudaGetErrorString(e));
  return 0;
}
int32_t checkModelCall(kiln_cudaexec_session_s &s, const char *what,
                       kiln_cudaexec_error_t *err) {
  return checkModelCall(s.ctx, what, err);
}

void clearModelStatus(kiln_cuda_ctx &ctx) {
  ctx.status = 0;
  ctx.error[0] = '\0';
}
void clearModelStatus(kiln_cudaexec_session_s &s) { clearModelStatus(s.ctx); }

/// Before host code rewrites hIo: the last H2D copy from it must be done.
int32_t waitIo(kiln_cudaexec_session_s &s, kiln_cudaexec_error_t *err) {
  if (s.ioPending) {
    KILN_CUDA_CHECK(cudaEventSynchronize(s.ioFree));
    s.ioPending = false;
  }
  return 0;
}

/// Copies hIo[0, 16 + 4n) (position and n token ids) to the device.
int32_t uploadStep(kiln_cudaexec_session_s &s, const int32_t *tokens,
                   int64_t n, int64_t pos, kiln_cudaexec_error_t *err) {
  KILN_RETURN_IF_FAILED(waitIo(s, err));
  std::memcpy(s.hIo + kPosOffset, &pos, sizeof(pos));
  std::memcpy(s.hIo + kTokensOffset, tokens, size_t(n) * sizeof(int32_t));
  KILN_CUDA_CHECK(cudaMemcpyAsync(s.dIo, s.hIo,
                                  kTokensOffset + uint64_t(n) * sizeof(int32_t),
                                  cudaMemcpyHostToDevice, s.stream));
  KILN_CUDA_CHECK(cudaEventRecord(s.ioFree, s.stream));
  s.ioPending = true;
  return 0;
}

/// cudaStreamSynchronize, bounded for a tensor-parallel rank: a step that
/// waits in an all-reduce for a peer that died or hung would never finish,
/// so after desc.timeout_ms the communicator is aborted (which ends the
/// pending NCCL kernels) and the step fails with KILN_RT_DEADLINE_EXCEEDED.
int32_t waitStream(kiln_cudaexec_model_s &m, cudaStream_t stream,
                   const char *what, kiln_cudaexec_error_t *err) {
  if ((!m.nccl && !m.ncclPipeline) || m.desc.timeout_ms <= 0)
    return 0; // the caller synchronizes without bound
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t q = cudaStreamQuery(stream);
    if (q != cudaErrorNotReady)
      return 0; // done, or an error the caller's synchronize reports
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    if (waited > m.desc.timeout_ms) {
#ifdef KILN_HAVE_NCCL
      if (m.nccl)
        ncclCommAbort(static_cast<ncclComm_t>(m.nccl));
      if (m.ncclPipeline)
        ncclCommAbort(static_cast<ncclComm_t>(m.ncclPipeline));
#endif
      m.nccl = nullptr;
      m.ncclPipeline = nullptr;
      const int32_t tp = m.desc.tp_size > 1 ? m.desc.tp_size : 1;
      const int32_t pp = m.desc.pp_size > 1 ? m.desc.pp_size : 1;
      return setError(err, KILN_RT_DEADLINE_EXCEEDED,
                      "rank %d of %d: %s did not finish within %.1f s on "
                      "device %d: a peer rank died or hung in an NCCL "
                      "all-reduce or stage transfer (KILN_COMM_TIMEOUT_S "
                      "sets the limit)",
                      m.desc.stage * tp + m.desc.tp_rank, tp * pp, what,
                      double(m.desc.timeout_ms) / 1000.0, m.device);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

int32_t synchronize(kiln_cudaexec_session_s &s, const char *what,
                    kiln_cudaexec_error_t *err) {
  KILN_RETURN_IF_FAILED(waitStream(*s.model, s.stream, what, err));
  cudaError_t e = cudaStreamSynchronize(s.stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(err, codeOf(e),
                    "cudaStreamSynchronize after %s failed at %s:%d: %s", what,
                    baseName(__FILE__), __LINE__, cudaGetErrorString(e));
  }
  s.ioPending = false;
  return 0;
}

/// Captures kiln_decode(ctx, 1, pos) on the session stream into s.graphExec.
int32_t captureDecode(kiln_cudaexec_session_s &s, int64_t pos,
                      kiln_cudaexec_error_t *err) {
  KILN_CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  clearModelStatus(s);
  s.model->desc.decode(&s.ctx, 1, pos);
  cudaGraph_t graph = nullptr;
  cudaError_t endErr = cudaStreamEndCapture(s.stream, &graph);
  if (s.ctx.status != 0 || endErr != cudaSuccess) {
    if (graph)
      cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    std::string reported = s.ctx.status ? std::string(s.ctx.error) : "";
    return setError(
        err, KILN_RT_INTERNAL,
        "capturing kiln_decode into a CUDA graph failed: %s%s%s%s "
        "(KILN_CUDA_GRAPHS=0 runs decode eagerly)",
        endErr != cudaSuccess ? "cudaStreamEndCapture: " : "",
        endErr != cudaSuccess ? cudaGetErrorString(endErr) : "",
        (endErr != cudaSuccess && !reported.empty()) ? "; " : "",
        reported.c_str());
  }
  KILN_RETURN_IF_FAILED(checkModelCall(s, "kiln_decode (capture)", err));
  s.graph = graph;
  KILN_CUDA_CHECK(cudaGraphInstantiate(&s.graphExec, s.graph, 0));
  return 0;
}

//===----------------------------------------------------------------------===//
// The table entries
//===----------------------------------------------------------------------===//

int32_t deviceProbe(char *outName, size_t capacity, uint64_t *outMemory,
                    kiln_cudaexec_error_t *err) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(err, KILN_RT_NOT_FOUND, "cudaGetDeviceCount: %s",
                    cudaGetErrorString(e));
  }
  if (count < 1)
    return setError(err, KILN_RT_NOT_FOUND,
                    "cudaGetDeviceCount: no CUDA-capable device is detected");
  cudaDeviceProp prop;
  KILN_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (outMemory)
    *outMemory = uint64_t(prop.totalGlobalMem);
  if (outName && capacity)
    std::snprintf(outName, capacity, "%s (%d SMs, %.0f GiB, sm_%d%d)", prop.name,
                  prop.multiProcessorCount,
                  double(prop.totalGlobalMem) / double(1ull << 30), prop.major,
                  prop.minor);
  return 0;
}

int32_t modelCreateImpl(const kiln_cudaexec_model_desc_t *desc,
                        kiln_cudaexec_model_s &m, kiln_cudaexec_error_t *err) {
  if (!desc || !desc->prefill || !desc->decode || !desc->sample ||
      !desc->workspace_bytes || !desc->abi_version ||
      (desc->weights_bytes && !desc->weights) || desc->max_prefill_tokens < 1 ||
      desc->vocab_size < 1)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "model_create: incomplete model description");
  m.desc = *desc;
  int32_t abi = desc->abi_version();
  if (abi != KILN_CUDA_ABI_VERSION)
    return setError(err, KILN_RT_UNIMPLEMENTED,
                    "model.so was built for CUDA ABI version %d, this runtime "
                    "implements version %d (recompile the artifact)",
                    abi, KILN_CUDA_ABI_VERSION);
  const int32_t tp = desc->tp_size > 1 ? desc->tp_size : 1;
  const int32_t pp = desc->pp_size > 1 ? desc->pp_size : 1;
  if (tp * pp > 1) {
    // One device per rank of the node; NCCL joins the ranks' devices.
    const int32_t rank = desc->stage * tp + desc->tp_rank;
    int count = 0;
    KILN_CUDA_CHECK(cudaGetDeviceCount(&count));
    m.device = count > 0 ? desc->local_rank % count : 0;
    KILN_CUDA_CHECK(cudaSetDevice(m.device));
#ifdef KILN_HAVE_NCCL
    ncclUniqueId id;
    static_assert(sizeof(id.internal) == sizeof(desc->nccl_id),
                  "ncclUniqueId is 128 bytes");
    std::memcpy(id.internal, desc->nccl_id, sizeof(id.internal));
    // Without stages the job is the TP group; with stages one communicator
    // spans the job (stage transfers) and each stage's TP group is split
    // from it.
    ncclComm_t comm = nullptr;
    ncclResult_t r = ncclCommInitRank(&comm, tp * pp, id, rank);
    if (r != ncclSuccess)
      return setError(err, KILN_RT_INTERNAL,
                      "rank %d of %d: ncclCommInitRank on device %d failed: "
                      "%s",
                      rank, tp * pp, m.device, ncclGetErrorString(r));
    if (pp == 1) {
      m.nccl = comm;
    } else {
      m.ncclPipeline = comm;
      if (tp > 1) {
        ncclComm_t group = nullptr;
        r = ncclCommSplit(comm, desc->stage, desc->tp_rank, &group, nullptr);
        if (r != ncclSuccess)
          return setError(err, KILN_RT_INTERNAL,
                          "rank %d of %d: ncclCommSplit of stage %d's "
                          "tensor-parallel group failed: %s",
                          rank, tp * pp, desc->stage, ncclGetErrorString(r));
        m.nccl = group;
      }
    }
#else
    return setError(err, KILN_RT_UNIMPLEMENTED,
                    "this CUDA executor was built without NCCL: partitioned "
                    "cuda artifacts (tp %d, pp %d) need it",
                    tp, pp);
#endif
  }
  KILN_CUDA_CHECK(cudaSetDevice(m.device));
  int sms = 0;
  KILN_CUDA_CHECK(
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, m.device));
  m.smCount = sms;
  m.workspaceBytes = alignUp(desc->workspace_bytes(), kAlign);
  KILN_RETURN_IF_FAILED(createCublasLt(m, err));
  return uploadWeights(m, err);
}

int32_t modelCreate(const kiln_cudaexec_model_desc_t *desc,
                    kiln_cudaexec_model_t **outModel,
                    kiln_cudaexec_error_t *err) {
  auto *m = new (std::nothrow) kiln_cudaexec_model_s();
  if (!m)
    return setError(err, KILN_RT_RESOURCE_EXHAUSTED, "out of host memory");
  int32_t code = modelCreateImpl(desc, *m, err);
  if (code != 0) {
    delete m;
    return code;
  }
  *outModel = m;
  return 0;
}

void modelRelease(kiln_cudaexec_model_t *model) { delete model; }

/// Creates b's stream and allocates its buffers (ioBytes of I/O, logitsRows
/// rows of logits, the model's arena and workspace), zeroed; points b.ctx
/// at them (tokens at tokensOffset, the position at posOffset of the I/O
/// buffer). The caller sets ctx.kv / batch / kv_pages.
int32_t allocateRunBuffers(RunBuffers &b, uint64_t ioBytes, uint64_t tokensOffset,
                           uint64_t posOffset, uint64_t logitsRows,
                           kiln_cudaexec_error_t *err) {
  kiln_cudaexec_model_s &m = *b.model;
  const kiln_cudaexec_model_desc_t &d = m.desc;
  KILN_CUDA_CHECK(cudaSetDevice(m.device));
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
  b.ioBytes = ioBytes;
  KILN_RETURN_IF_FAILED(deviceAlloc(&b.dIo, ioBytes, "token/position buffer", err));
  KILN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&b.hIo), ioBytes,
                                cudaHostAllocDefault));
  std::memset(b.hIo, 0, ioBytes);
  KILN_RETURN_IF_FAILED(deviceAlloc(&b.dArena, d.arena_bytes, "activation arena", err));
  const uint64_t logitsBytes = logitsRows * uint64_t(d.vocab_size) * sizeof(float);
  KILN_RETURN_IF_FAILED(deviceAlloc(&b.dLogits, logitsBytes, "logits", err));
  KILN_CUDA_CHECK(cudaHostAlloc(reinterpret_cast<void **>(&b.hLogits),
                                logitsBytes, cudaHostAllocDefault));
  KILN_RETURN_IF_FAILED(
      deviceAlloc(&b.dWorkspace, m.workspaceBytes, "cuBLASLt/kernel workspace", err));
  KILN_CUDA_CHECK(cudaMemsetAsync(b.dIo, 0, ioBytes, b.stream));
  KILN_CUDA_CHECK(cudaMemsetAsync(b.dLogits, 0, logitsBytes, b.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(b.stream));
  kiln_cuda_ctx &c = b.ctx;
  c.arena = b.dArena;
  c.weights = m.dWeights;
  c.tokens = reinterpret_cast<const int32_t *>(b.dIo + tokensOffset);
  c.logits = b.dLogits;
  c.d_pos = reinterpret_cast<const int64_t *>(b.dIo + posOffset);
  c.stream = b.stream;
  c.cublaslt = m.cublasLt;
  c.workspace = b.dWorkspace;
  c.workspace_bytes = m.workspaceBytes;
  c.sm_count = m.smCount;
  c.nccl = m.nccl;
  c.nccl_pipeline = m.ncclPipeline;
  c.tp_size = m.desc.tp_size > 1 ? m.desc.tp_size : 1;
  c.tp_rank = m.desc.tp_rank;
  clearModelStatus(c);
  return 0;
}

int32_t sessionCreateImpl(kiln_cudaexec_session_s &s, kiln_cudaexec_error_t *err) {
  const kiln_cudaexec_model_desc_t &d = s.model->desc;
  s.coinOffset =
      alignUp(kTokensOffset + uint64_t(d.max_prefill_tokens) * sizeof(int32_t), 16);
  s.tokenOffset = s.coinOffset + 16;
  KILN_RETURN_IF_FAILED(allocateRunBuffers(s, s.tokenOffset + 16, kTokensOffset,
                                           kPosOffset, 1, err));
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&s.ioFree, cudaEventDisableTiming));
  KILN_RETURN_IF_FAILED(deviceAlloc(&s.dKv, d.kv_bytes, "KV cache", err));
  KILN_CUDA_CHECK(cudaMemsetAsync(s.dKv, 0, d.kv_bytes, s.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.ctx.kv = s.dKv;
  const char *graphs = std::getenv("KILN_CUDA_GRAPHS");
  s.useGraph = !(graphs && std::strcmp(graphs, "0") == 0);
  return 0;
}

int32_t sessionCreate(kiln_cudaexec_model_t *model,
                      kiln_cudaexec_session_t **outSession,
                      kiln_cudaexec_error_t *err) {
  if (!model || !outSession)
    return setError(err, KILN_RT_INVALID_ARGUMENT, "session_create: null argument");
  auto *s = new (std::nothrow) kiln_cudaexec_session_s();
  if (!s)
    return setError(err, KILN_RT_RESOURCE_EXHAUSTED, "out of host memory");
  s->model = model;
  int32_t code = sessionCreateImpl(*s, err);
  if (code != 0) {
    delete s;
    return code;
  }
  *outSession = s;
  return 0;
}

void sessionRelease(kiln_cudaexec_session_t *session) { delete session; }

int32_t sessionReset(kiln_cudaexec_session_t *s, kiln_cudaexec_error_t *err) {
  KILN_CUDA_CHECK(cudaMemsetAsync(s->dKv, 0, s->model->desc.kv_bytes, s->stream));
  s->logitsOnHost = false;
  return 0;
}

int32_t sessionPrefill(kiln_cudaexec_session_t *s, const int32_t *tokens,
                       int64_t n, int64_t pos, kiln_cudaexec_error_t *err) {
  const int64_t chunk = s->model->desc.max_prefill_tokens;
  s->logitsOnHost = false;
  for (int64_t i = 0; i < n; i += chunk) {
    int64_t m = std::min(chunk, n - i);
    KILN_RETURN_IF_FAILED(uploadStep(*s, tokens + i, m, pos + i, err));
    clearModelStatus(*s);
    s->model->desc.prefill(&s->ctx, m, pos + i);
    KILN_RETURN_IF_FAILED(checkModelCall(*s, "kiln_prefill", err));
  }
  KILN_RETURN_IF_FAILED(synchronize(*s, "kiln_prefill", err));
  return checkModelCall(*s, "kiln_prefill", err);
}

int32_t sessionDecode(kiln_cudaexec_session_t *s, int32_t token, int64_t pos,
                      kiln_cudaexec_error_t *err) {
  s->logitsOnHost = false;
  if (!s->useGraph) {
    KILN_RETURN_IF_FAILED(uploadStep(*s, &token, 1, pos, err));
    clearModelStatus(*s);
    s->model->desc.decode(&s->ctx, 1, pos);
    KILN_RETURN_IF_FAILED(checkModelCall(*s, "kiln_decode", err));
  } else {
    if (!s->graphExec)
      KILN_RETURN_IF_FAILED(captureDecode(*s, pos, err));
    // Token and position travel outside the graph, ahead of its launch.
    KILN_RETURN_IF_FAILED(uploadStep(*s, &token, 1, pos, err));
    KILN_CUDA_CHECK(cudaGraphLaunch(s->graphExec, s->stream));
  }
  KILN_RETURN_IF_FAILED(synchronize(*s, "kiln_decode", err));
  return 0;
}

int32_t sessionVerify(kiln_cudaexec_session_t *s, const int32_t *tokens,
                      int64_t n, int64_t pos, float *rows,
                      kiln_cudaexec_error_t *err) {
  const kiln_cudaexec_model_desc_t &d = s->model->desc;
  if (!d.verify)
    return setError(err, KILN_RT_UNIMPLEMENTED,
                    "the artifact has no verify entry point (recompile it "
                    "with kiln-compile --speculative)");
  if (!rows || n < 1)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "session_verify: null rows or no tokens");
  const int64_t chunk = d.max_prefill_tokens, vocab = d.vocab_size;
  const uint64_t rowBytes = uint64_t(vocab) * sizeof(float);
  if (!s->dVerifyLogits)
    KILN_RETURN_IF_FAILED(deviceAlloc(&s->dVerifyLogits,
                                      uint64_t(chunk) * rowBytes,
                                      "verify logits", err));
  s->logitsOnHost = false;
  float *sessionLogits = s->ctx.logits;
  int64_t last = 0;
  for (int64_t i = 0; i < n; i += chunk) {
    const int64_t m = std::min(chunk, n - i);
    KILN_RETURN_IF_FAILED(uploadStep(*s, tokens + i, m, pos + i, err));
    clearModelStatus(*s);
    s->ctx.logits = s->dVerifyLogits;
    d.verify(&s->ctx, m, pos + i);
    s->ctx.logits = sessionLogits;
    KILN_RETURN_IF_FAILED(checkModelCall(*s, "kiln_verify", err));
    KILN_CUDA_CHECK(cudaMemcpyAsync(rows + i * vocab, s->dVerifyLogits,
                                    uint64_t(m) * rowBytes,
                                    cudaMemcpyDeviceToHost, s->stream));
    // The next chunk overwrites the device rows: wait for the copy.
    KILN_RETURN_IF_FAILED(synchronize(*s, "copying the verify logits", err));
    last = m;
  }
  KILN_CUDA_CHECK(cudaMemcpyAsync(s->dLogits,
                                  s->dVerifyLogits + (last - 1) * vocab,
                                  rowBytes, cudaMemcpyDeviceToDevice,
                                  s->stream));
  KILN_RETURN_IF_FAILED(synchronize(*s, "kiln_verify", err));
  return checkModelCall(*s, "kiln_verify", err);
}

int32_t sessionLogits(kiln_cudaexec_session_t *s, const float **out,
                      kiln_cudaexec_error_t *err) {
  if (!s->logitsOnHost) {
    KILN_CUDA_CHECK(cudaMemcpyAsync(
        s->hLogits, s->dLogits, uint64_t(s->model->desc.vocab_size) * sizeof(float),
        cudaMemcpyDeviceToHost, s->stream));
    KILN_RETURN_IF_FAILED(synchronize(*s, "copying the logits", err));
    s->logitsOnHost = true;
  }
  *out = s->hLogits;
  return 0;
}

int32_t sessionSample(kiln_cudaexec_session_t *s, float temperature,
                      int32_t topK, float topP, float coin, int32_t *outToken,
                      kiln_cudaexec_error_t *err) {
  KILN_RETURN_IF_FAILED(waitIo(*s, err));
  std::memcpy(s->hIo + s->coinOffset, &coin, sizeof(coin));
  KILN_CUDA_CHECK(cudaMemcpyAsync(s->dIo + s->coinOffset, s->hIo + s->coinOffset,
                                  sizeof(float), cudaMemcpyHostToDevice,
                                  s->stream));
  clearModelStatus(*s);
  s->model->desc.sample(&s->ctx, temperature, topK, topP,
                        reinterpret_cast<const float *>(s->dIo + s->coinOffset),
                        reinterpret_cast<int32_t *>(s->dIo + s->tokenOffset));
  KILN_RETURN_IF_FAILED(checkModelCall(*s, "kiln_cuda_sample", err));
  KILN_CUDA_CHECK(cudaMemcpyAsync(s->hIo + s->tokenOffset, s->dIo + s->tokenOffset,
                                  sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  s->stream));
  KILN_RETURN_IF_FAILED(synchronize(*s, "kiln_cuda_sample", err));
  int32_t token;
  std::memcpy(&token, s->hIo + s->tokenOffset, sizeof(token));
  if (token < 0 || token >= s->model->desc.vocab_size)
    return setError(err, KILN_RT_INTERNAL,
                    "kiln_cuda_sample returned token id %d outside the "
                    "vocabulary [0, %lld)",
                    token, (long long)s->model->desc.vocab_size);
  *outToken = token;
  return 0;
}

int32_t stepperCreateImpl(kiln_cudaexec_stepper_s &t,
                          kiln_cudaexec_error_t *err) {
  const kiln_cudaexec_step_desc_t &d = t.desc;
  t.seqPosOffset = 0;
  t.tokensOffset = alignUp(uint64_t(d.max_seqs) * sizeof(int64_t), 16);
  t.positionsOffset =
      alignUp(t.tokensOffset + uint64_t(d.max_tokens) * sizeof(int32_t), 16);
  t.tablesOffset =
      alignUp(t.positionsOffset + uint64_t(d.max_tokens) * sizeof(int32_t), 16);
  const uint64_t ioBytes =
      t.tablesOffset +
      uint64_t(d.max_seqs) * uint64_t(d.max_blocks) * sizeof(int32_t);
  // ctx.d_pos: the sequences' first positions (no step kernel reads it).
  KILN_RETURN_IF_FAILED(allocateRunBuffers(t, ioBytes, t.tokensOffset,
                                           t.seqPosOffset,
                                           uint64_t(d.max_seqs), err));
  KILN_RETURN_IF_FAILED(deviceAlloc(&t.dPool, d.pool_bytes, "paged KV cache", err));
  KILN_CUDA_CHECK(cudaMemsetAsync(t.dPool, 0, d.pool_bytes, t.stream));
  KILN_CUDA_CHECK(cudaStreamSynchronize(t.stream));

  const bool quantized = d.format != KILN_CUDA_KV_PLAIN;
  for (const kiln_cudaexec_layer_pool_t &l : t.layerPools) {
    kiln_cuda_paged_kv kv{};
    kv.format = d.format;
    kv.block_tokens = d.block_tokens;
    kv.rows = d.num_blocks * d.block_tokens;
    kv.k_pool = t.dPool + l.k_offset;
    kv.v_pool = t.dPool + l.v_offset;
    if (quantized) {
      kv.k_scales = reinterpret_cast<float *>(t.dPool + l.k_scales_offset);
      kv.v_scales = reinterpret_cast<float *>(t.dPool + l.v_scales_offset);
    }
    t.pages.push_back(kv);
  }
  kiln_cuda_ctx &c = t.ctx;
  c.kv = nullptr; // the step addresses the paged pool only
  c.batch = &t.batch;
  c.kv_pages = t.pages.data();
  return 0;
}

int32_t stepperCreate(kiln_cudaexec_model_t *model,
                      const kiln_cudaexec_step_desc_t *desc,
                      kiln_cudaexec_stepper_t **out,
                      kiln_cudaexec_error_t *err) {
  if (!model || !desc || !out || !desc->layer_pools || desc->layers < 1 ||
      desc->block_tokens < 1 || desc->num_blocks < 1 || desc->max_seqs < 1 ||
      desc->max_tokens < 1 || desc->max_blocks < 1 || desc->pool_bytes == 0 ||
      desc->format < KILN_CUDA_KV_PLAIN || desc->format > KILN_CUDA_KV_FP8)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "stepper_create: incomplete step description");
  if (!model->desc.step)
    return setError(err, KILN_RT_UNIMPLEMENTED,
                    "stepper_create: model.so has no kiln_step entry point");
  if (desc->max_tokens > model->desc.max_prefill_tokens)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "stepper_create: %d token rows per step exceed the plan's "
                    "%lld",
                    desc->max_tokens, (long long)model->desc.max_prefill_tokens);
  auto *t = new (std::nothrow) kiln_cudaexec_stepper_s();
  if (!t)
    return setError(err, KILN_RT_RESOURCE_EXHAUSTED, "out of host memory");
  t->model = model;
  t->desc = *desc;
  t->layerPools.assign(desc->layer_pools, desc->layer_pools + desc->layers);
  t->desc.layer_pools = t->layerPools.data();
  int32_t code = stepperCreateImpl(*t, err);
  if (code != 0) {
    delete t;
    return code;
  }
  *out = t;
  return 0;
}

void stepperRelease(kiln_cudaexec_stepper_t *stepper) { delete stepper; }

int32_t stepperRun(kiln_cudaexec_stepper_t *t, const kiln_cudaexec_step_t *step,
                   const float **outLogits, kiln_cudaexec_error_t *err) {
  const kiln_cudaexec_step_desc_t &d = t->desc;
  const int32_t S = step ? step->num_seqs : 0, T = step ? step->num_tokens : 0;
  if (!step || !outLogits || S < 1 || S > d.max_seqs || T < S ||
      T > d.max_tokens || step->max_blocks < 1 ||
      step->max_blocks > d.max_blocks)
    return setError(err, KILN_RT_INVALID_ARGUMENT,
                    "stepper_run: a step of %d sequences and %d rows outside "
                    "the stepper's limits (%d, %d)",
                    S, T, d.max_seqs, d.max_tokens);
  auto *seqPos = reinterpret_cast<int64_t *>(t->hIo + t->seqPosOffset);
  for (int32_t s = 0; s < S; ++s)
    seqPos[s] = step->pos[s];
  std::memcpy(t->hIo + t->tokensOffset, step->tokens, sizeof(int32_t) * size_t(T));
  std::memcpy(t->hIo + t->positionsOffset, step->positions,
              sizeof(int32_t) * size_t(T));
  const size_t tableBytes =
      sizeof(int32_t) * size_t(S) * size_t(step->max_blocks);
  std::memcpy(t->hIo + t->tablesOffset, step->block_tables, tableBytes);
  // Copy-on-write of shared blocks, stream-ordered before the step.
  const uint64_t B = uint64_t(d.block_tokens);
  for (int32_t i = 0; i < step->num_copies; ++i) {
    const uint64_t src = uint64_t(step->copy_src[i]),
                   dst = uint64_t(step->copy_dst[i]);
    if (src >= uint64_t(d.num_blocks) || dst >= uint64_t(d.num_blocks))
      return setError(err, KILN_RT_INVALID_ARGUMENT,
                      "stepper_run: block copy %llu -> %llu outside the pool",
                      (unsigned long long)src, (unsigned long long)dst);
    for (const kiln_cudaexec_layer_pool_t &l : t->layerPools) {
      const uint64_t offsets[4] = {l.k_offset, l.v_offset, l.k_scales_offset,
                                   l.v_scales_offset};
      for (int j = 0; j < (d.scale_row_bytes ? 4 : 2); ++j) {
        const uint64_t row = j < 2 ? d.kv_row_bytes : d.scale_row_bytes;
        KILN_CUDA_CHECK(cudaMemcpyAsync(
            t->dPool + offsets[j] + dst * B * row,
            t->dPool + offsets[j] + src * B * row, B * row,
            cudaMemcpyDeviceToDevice, t->stream));
      }
    }
  }
  KILN_CUDA_CHECK(cudaMemcpyAsync(t->dIo, t->hIo, t->tablesOffset + tableBytes,
                                  cudaMemcpyHostToDevice, t->stream));
  kiln_cuda_batch &b = t->batch;
  b.num_seqs = S;
  b.max_blocks = step->max_blocks;
  b.row_start = step->row_start;
  b.row_count = step->row_count;
  b.pos = step->pos;
  b.d_positions = reinterpret_cast<const int32_t *>(t->dIo + t->positionsOffset);
  b.d_seq_pos = reinterpret_cast<const int64_t *>(t->dIo + t->seqPosOffset);
  b.d_block_tables = reinterpret_cast<const int32_t *>(t->dIo + t->tablesOffset);
  clearModelStatus(t->ctx);
  t->model->desc.step(&t->ctx, T, 0);
  const int32_t code = checkModelCall(t->ctx, "kiln_step", err);
  // The host arrays of the batch belong to the caller: never kept.
  b.row_start = b.row_count = b.pos = nullptr;
  KILN_RETURN_IF_FAILED(code);
  const uint64_t vocab = uint64_t(t->model->desc.vocab_size);
  KILN_CUDA_CHECK(cudaMemcpyAsync(t->hLogits, t->dLogits,
                                  uint64_t(S) * vocab * sizeof(float),
                                  cudaMemcpyDeviceToHost, t->stream));
  KILN_RETURN_IF_FAILED(waitStream(*t->model, t->stream, "kiln_step", err));
  cudaError_t e = cudaStreamSynchronize(t->stream);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return setError(err, codeOf(e),
                    "cudaStreamSynchronize after kiln_step failed at %s:%d: %s",
                    baseName(__FILE__), __LINE__, cudaGetErrorString(e));
  }
  KILN_RETURN_IF_FAILED(checkModelCall(t->ctx, "kiln_step", err));
  *outLogits = t->hLogits;
  return 0;
}

int32_t memcpyBandwidth(uint64_t bytes, int32_t reps, double *out,
                        kiln_cudaexec_error_t *err) {
  if (bytes == 0 || reps < 1 || !out)
    return setError(err, KILN_RT_INVALID_ARGUMENT, "memcpy_bandwidth: bad argument");
  struct Buffers {
    uint8_t *a = nullptr, *b = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    ~Buffers() {
      if (a)
        cudaFree(a);
      if (b)
        cudaFree(b);
      if (start)
        cudaEventDestroy(start);
      if (stop)
        cudaEventDestroy(stop);
    }
  } r;
  KILN_CUDA_CHECK(cudaSetDevice(0));
  KILN_RETURN_IF_FAILED(deviceAlloc(&r.a, bytes, "bandwidth source", err));
  KILN_RETURN_IF_FAILED(deviceAlloc(&r.b, bytes, "bandwidth destination", err));
  KILN_CUDA_CHECK(cudaMemset(r.a, 1, bytes));
  KILN_CUDA_CHECK(cudaEventCreate(&r.start));
  KILN_CUDA_CHECK(cudaEventCreate(&r.stop));
  KILN_CUDA_CHECK(cudaMemcpy(r.b, r.a, bytes, cudaMemcpyDeviceToDevice)); // warm-up
  double best = 0;
  for (int32_t i = 0; i < reps; ++i) {
    KILN_CUDA_CHECK(cudaEventRecord(r.start, nullptr));
    KILN_CUDA_CHECK(cudaMemcpyAsync(r.b, r.a, bytes, cudaMemcpyDeviceToDevice, nullptr));
    KILN_CUDA_CHECK(cudaEventRecord(r.stop, nullptr));
    KILN_CUDA_CHECK(cudaEventSynchronize(r.stop));
    float ms = 0;
    KILN_CUDA_CHECK(cudaEventElapsedTime(&ms, r.start, r.stop));
    if (ms > 0)
      best = std::max(best, 2.0 * double(bytes) / (double(ms) * 1e-3));
  }
  *out = best;
  return 0;
}

int32_t ncclUniqueIdOf(uint8_t *out, kiln_cudaexec_error_t *err) {
#ifdef KILN_HAVE_NCCL
  ncclUniqueId id;
  ncclResult_t r = ncclGetUniqueId(&id);
  if (r != ncclSuccess)
    return setError(err, KILN_RT_INTERNAL, "ncclGetUniqueId failed: %s",
                    ncclGetErrorString(r));
  std::memcpy(out, id.internal, sizeof(id.internal));
  return 0;
#else
  (void)out;
  return setError(err, KILN_RT_UNIMPLEMENTED,
                  "this CUDA executor was built without NCCL: partitioned "
                  "cuda artifacts need it (install NCCL and rebuild)");
#endif
}

const kiln_cudaexec_api_t kApi = {
    KILN_CUDAEXEC_INTERFACE_VERSION,
    sizeof(kiln_cudaexec_api_t),
    deviceProbe,
    modelCreate,
    modelRelease,
    sessionCreate,
    sessionRelease,
    sessionReset,
    sessionPrefill,
    sessionDecode,
    sessionLogits,
    sessionSample,
    stepperCreate,
    stepperRelease,
    stepperRun,
    memcpyBandwidth,
    ncclUniqueIdOf,
    sessionVerify,
};

} // namespace

extern "C" __attribute__((visibility("default"))) const kiln_cudaexec_api_t *
kiln_cudaexec_get_api(void) {
  return &kApi;
}
