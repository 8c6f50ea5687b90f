//===- KilnCudaComm.cuh - Collectives of partitioned CUDA plans -*- CUDA -*-===//
//
// Included by model.cu only when the plan was partitioned (kiln-compile
// --tp N / --pp M --target=cuda; docs/parallelism.md), so that single-GPU
// artifacts neither include nor link NCCL.
//
//   kiln_cuda_all_reduce(ctx, x, y, count, elem, what): y[0, count) = the
//   elementwise sum over the ranks of the group of each rank's x (kiln.all_
//   reduce; Megatron-LM's `g` operator, Shoeybi et al. 2019, section 3) with
//   ncclAllReduce(ncclSum) on ctx->stream over the communicator
//   ctx->nccl, which the CUDA executor created for the rank's device
//   (ncclCommInitRank with the unique id rank 0 broadcast over MPI). T is
//   float, __half or __nv_bfloat16; NCCL sums 16-bit values in their own
//   type (the CPU kernel sums in float32 and rounds once: with two ranks
//   both are one correctly rounded addition). With ctx->nccl NULL (one
//   rank) y = x. Enqueued only, so a CUDA graph may capture it; a peer that
//   never joins shows up as a step that does not finish, which the
//   executor bounds with its deadline (KILN_COMM_TIMEOUT_S) and turns into
//   ncclCommAbort and an error naming the rank.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_CODEGEN_CUDA_KILNCUDACOMM_CUH
#define KILN_CODEGEN_CUDA_KILNCUDACOMM_CUH

#include "KilnCudaCommon.cuh"

#include <nccl.h>

/// ctx->status of an NCCL failure is this plus the ncclResult_t.
#define KILN_CUDA_NCCL_STATUS_BASE 200000

namespace kiln_cuda_detail {
/// Records an NCCL failure of `call` for the collective named `what`.
inline bool checkNccl(kiln_cuda_ctx *ctx, ncclResult_t r, const char *call,
                      const char *what, const char *file, int line) {
  if (r == ncclSuccess)
    return true;
  char reason[160];
  std::snprintf(reason, sizeof(reason), "%s ('%s')", ncclGetErrorString(r),
                what ? what : "?");
  setError(ctx, KILN_CUDA_NCCL_STATUS_BASE + int32_t(r), call, file, line,
           reason);
  return false;
}

template <typename T> inline ncclDataType_t ncclTypeOf();
template <> inline ncclDataType_t ncclTypeOf<float>() { return ncclFloat32; }
template <> inline ncclDataType_t ncclTypeOf<__half>() { return ncclFloat16; }
template <> inline ncclDataType_t ncclTypeOf<__nv_bfloat16>() {
  return ncclBfloat16;
}
} // namespace kiln_cuda_detail

template <typename T>
inline void kiln_cuda_all_reduce(kiln_cuda_ctx *ctx, const T *x, T *y,
                                 int64_t count, int64_t elem,
                                 const char *what) {
  using namespace kiln_cuda_detail;
  (void)elem;
  if (skip(ctx) || count == 0)
    return;
  if (x != y && !KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(
                                          y, x, sizeof(T) * size_t(count),
                                          cudaMemcpyDeviceToDevice,
                                          streamOf(ctx))))
    return;
  if (!ctx->nccl)
    return;
  checkNccl(ctx,
            ncclAllReduce(y, y, size_t(count), ncclTypeOf<T>(), ncclSum,
                          static_cast<ncclComm_t>(ctx->nccl), streamOf(ctx)),
            "ncclAllReduce", what, __FILE__, __LINE__);
}

/// The all-gather's staging buffer: model.cu of a partitioned plan defines
/// it (PlanToEmitC) as the fused scratch of ctx->workspace, which the plan
/// sizes for its largest gather; *bytes gets the buffer's size.
static void *kiln_cuda_gather_scratch(const kiln_cuda_ctx *ctx,
                                      uint64_t *bytes);

/// kiln.all_gather (the vocab-parallel classifier's logits; Megatron-LM's
/// vocab-parallel embedding, Shoeybi et al. 2019, section 3): y[rows,
/// ranks * cols] = the ranks' x[rows, cols] column blocks side by side.
/// One row (prefill and decode of a session): ncclAllGather straight into
/// y. Several rows (the batched step's sequences): ncclAllGather into the
/// staging buffer as [ranks][rows][cols], then one strided copy per rank
/// (cudaMemcpy2DAsync) into its column block of y. All on ctx->stream.
template <typename T>
inline void kiln_cuda_all_gather(kiln_cuda_ctx *ctx, const T *x, T *y,
                                 int64_t rows, int64_t cols, int64_t elem,
                                 const char *what) {
  using namespace kiln_cuda_detail;
  (void)elem;
  if (skip(ctx))
    return;
  if (!ctx->nccl) {
    KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(y, x, sizeof(T) * size_t(rows * cols),
                                         cudaMemcpyDeviceToDevice,
                                         streamOf(ctx)));
    return;
  }
  const ncclComm_t comm = static_cast<ncclComm_t>(ctx->nccl);
  if (rows == 1) {
    checkNccl(ctx,
              ncclAllGather(x, y, size_t(cols), ncclTypeOf<T>(), comm,
                            streamOf(ctx)),
              "ncclAllGather", what, __FILE__, __LINE__);
    return;
  }
  const uint64_t block = uint64_t(rows) * uint64_t(cols) * sizeof(T);
  uint64_t have = 0;
  void *staged = kiln_cuda_gather_scratch(ctx, &have);
  if (!KILN_CUDA_ARG(ctx,
                     staged != nullptr &&
                         have >= block * uint64_t(ctx->tp_size),
                     "kiln_cuda_all_gather",
                     "the workspace's staging buffer is smaller than the "
                     "gathered rows (rows beyond the plan's max_tokens?)"))
    return;
  if (!checkNccl(ctx,
                 ncclAllGather(x, staged, size_t(rows * cols), ncclTypeOf<T>(),
                               comm, streamOf(ctx)),
                 "ncclAllGather", what, __FILE__, __LINE__))
    return;
  const size_t rowBytes = size_t(cols) * sizeof(T);
  for (int32_t r = 0; r < ctx->tp_size; ++r)
    if (!KILN_CUDA_CHECK(
            ctx, cudaMemcpy2DAsync(y + size_t(r) * size_t(cols),
                                   rowBytes * size_t(ctx->tp_size),
                                   static_cast<const uint8_t *>(staged) +
                                       size_t(r) * size_t(block),
                                   rowBytes, rowBytes, size_t(rows),
                                   cudaMemcpyDeviceToDevice, streamOf(ctx))))
      return;
}

//===----------------------------------------------------------------------===//
// Sequence parallelism (Korthikanti et al. 2022; kiln_rt/sequence_shard.h):
// n rows split over the TP group, rank r holding rows [start_r, start_r +
// rows_r). NCCL's reduce-scatter and all-gather move equal blocks, so the
// shards travel padded to c = ceil(n / N) rows through the staging buffer
// (kiln_cuda_gather_scratch, which the plan sizes for 2 (max_tokens + tp)
// rows of the widest such activation). Below min_tokens rows every rank
// holds every row and the calls are an all-reduce or a copy.
//===----------------------------------------------------------------------===//

namespace kiln_cuda_detail {
/// Stream-ordered copy of `rows` rows of `rowBytes` (overlap allowed: an
/// overlapping pair goes through `scratch`).
inline bool copyRows(kiln_cuda_ctx *ctx, void *dst, const void *src,
                     size_t bytes, void *scratch, uint64_t scratchBytes) {
  if (dst == src || bytes == 0)
    return true;
  const auto *d = static_cast<const uint8_t *>(dst);
  const auto *s = static_cast<const uint8_t *>(src);
  if (d < s + bytes && s < d + bytes) {
    if (!KILN_CUDA_ARG(ctx, scratch != nullptr && scratchBytes >= bytes,
                       "kiln_cuda_all_slice",
                       "the staging buffer is smaller than the rows"))
      return false;
    if (!KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(scratch, src, bytes,
                                              cudaMemcpyDeviceToDevice,
                                              streamOf(ctx))))
      return false;
    src = scratch;
  }
  return KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(dst, src, bytes,
                                              cudaMemcpyDeviceToDevice,
                                              streamOf(ctx)));
}
} // namespace kiln_cuda_detail

/// Rows [start, start + rows) of this rank of x [n, cols] into y (local).
template <typename T>
inline void kiln_cuda_all_slice(kiln_cuda_ctx *ctx, const T *x, T *y,
                                int64_t n, int64_t cols, int64_t elem,
                                int64_t min_tokens, const char *what) {
  using namespace kiln_cuda_detail;
  (void)elem;
  (void)what;
  if (skip(ctx))
    return;
  const int64_t start =
      kiln_sequence_shard_start(n, ctx->tp_size, ctx->tp_rank, min_tokens);
  const int64_t rows =
      kiln_sequence_shard_rows(n, ctx->tp_size, ctx->tp_rank, min_tokens);
  uint64_t have = 0;
  void *scratch = kiln_cuda_gather_scratch(ctx, &have);
  copyRows(ctx, y, x + start * cols, sizeof(T) * size_t(rows * cols), scratch,
           have);
}

/// y [rows_r, cols] = this rank's rows of the sum over the group of x [n,
/// cols]: ncclReduceScatter over the shards padded to c rows.
template <typename T>
inline void kiln_cuda_reduce_scatter(kiln_cuda_ctx *ctx, const T *x, T *y,
                                     int64_t n, int64_t cols, int64_t elem,
                                     int64_t min_tokens, const char *what) {
  using namespace kiln_cuda_detail;
  if (skip(ctx))
    return;
  const int64_t N = ctx->tp_size;
  if (!ctx->nccl || !kiln_sequence_split(n, N, min_tokens)) {
    kiln_cuda_all_reduce(ctx, x, y, n * cols, elem, what);
    return;
  }
  const int64_t c = (n + N - 1) / N;
  const size_t block = sizeof(T) * size_t(c * cols);
  uint64_t have = 0;
  auto *staged = static_cast<uint8_t *>(kiln_cuda_gather_scratch(ctx, &have));
  if (!KILN_CUDA_ARG(ctx, staged != nullptr && have >= block * size_t(N),
                     "kiln_cuda_reduce_scatter",
                     "the staging buffer is smaller than the padded shards"))
    return;
  // Rank r's rows at block r, zero-padded to c rows.
  if (!KILN_CUDA_CHECK(ctx, cudaMemsetAsync(staged, 0, block * size_t(N),
                                            streamOf(ctx))))
    return;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t start = kiln_sequence_shard_start(n, N, r, min_tokens);
    const int64_t rows = kiln_sequence_shard_rows(n, N, r, min_tokens);
    if (!KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(staged + size_t(r) * block,
                                              x + start * cols,
                                              sizeof(T) * size_t(rows * cols),
                                              cudaMemcpyDeviceToDevice,
                                              streamOf(ctx))))
      return;
  }
  // The result's c rows: the rank's rows first, then padding, which y (an
  // activation of max_tokens rows) has room for.
  checkNccl(ctx,
            ncclReduceScatter(staged, y, size_t(c * cols), ncclTypeOf<T>(),
                              ncclSum, static_cast<ncclComm_t>(ctx->nccl),
                              streamOf(ctx)),
            "ncclReduceScatter", what, __FILE__, __LINE__);
}

/// y [n, cols] = every rank's shard x [rows_r, cols] at its rows:
/// ncclAllGather of the shards padded to c rows, then one copy per rank.
template <typename T>
inline void kiln_cuda_all_gather_rows(kiln_cuda_ctx *ctx, const T *x, T *y,
                                      int64_t n, int64_t cols, int64_t elem,
                                      int64_t min_tokens, const char *what) {
  using namespace kiln_cuda_detail;
  (void)elem;
  if (skip(ctx))
    return;
  const int64_t N = ctx->tp_size;
  uint64_t have = 0;
  auto *staged = static_cast<uint8_t *>(kiln_cuda_gather_scratch(ctx, &have));
  if (!ctx->nccl || !kiln_sequence_split(n, N, min_tokens)) {
    copyRows(ctx, y, x, sizeof(T) * size_t(n * cols), staged, have);
    return;
  }
  const int64_t c = (n + N - 1) / N;
  const size_t block = sizeof(T) * size_t(c * cols);
  if (!KILN_CUDA_ARG(ctx, staged != nullptr && have >= block * size_t(N + 1),
                     "kiln_cuda_all_gather_rows",
                     "the staging buffer is smaller than the padded shards"))
    return;
  const int64_t mine =
      kiln_sequence_shard_rows(n, N, ctx->tp_rank, min_tokens);
  uint8_t *send = staged + size_t(N) * block; // after the gathered blocks
  if (!KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(send, x,
                                            sizeof(T) * size_t(mine * cols),
                                            cudaMemcpyDeviceToDevice,
                                            streamOf(ctx))))
    return;
  if (!checkNccl(ctx,
                 ncclAllGather(send, staged, size_t(c * cols), ncclTypeOf<T>(),
                               static_cast<ncclComm_t>(ctx->nccl),
                               streamOf(ctx)),
                 "ncclAllGather", what, __FILE__, __LINE__))
    return;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t start = kiln_sequence_shard_start(n, N, r, min_tokens);
    const int64_t rows = kiln_sequence_shard_rows(n, N, r, min_tokens);
    if (!KILN_CUDA_CHECK(ctx, cudaMemcpyAsync(y + start * cols,
                                              staged + size_t(r) * block,
                                              sizeof(T) * size_t(rows * cols),
                                              cudaMemcpyDeviceToDevice,
                                              streamOf(ctx))))
      return;
  }
}

//===----------------------------------------------------------------------===//
// The 8-bit all-gather (kiln.all_gather_rows with wire_quant; kernel_abi.h
// kiln_k_all_gather_rows_q8): each rank quantizes its shard by the readers'
// rule into wire rows (kiln_wire_row in kiln_rt/sequence_shard.h: [scales
// f32][cols int8 codes], padded to 4), ncclAllGather moves bytes, every rank dequantizes y = q *
// scale. Same rounding as the CPU kernel and the readers (actQuantKernel):
// __fdiv_rn, roundf, codes clamped to [-127, 127].
//===----------------------------------------------------------------------===//

namespace kiln_cuda_detail {
/// Per token / per tensor: one block per row (grid-stride).
__global__ void __launch_bounds__(256)
    wireEncodeRowsKernel(const float *__restrict__ x, uint8_t *__restrict__ out,
                         int64_t rows, kiln_wire_row w, float scale) {
  __shared__ float sh[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *xr = x + r * w.cols;
    uint8_t *row = out + r * w.bytes;
    float s = scale;
    if (w.scales == 1) {
      float amax = 0.0f;
      for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x)
        amax = fmaxf(amax, fabsf(xr[i]));
      s = __fdiv_rn(blockMax(amax, sh), 127.0f);
      if (threadIdx.x == 0)
        reinterpret_cast<float *>(row)[0] = s;
    }
    int8_t *q = reinterpret_cast<int8_t *>(row + 4 * w.scales);
    for (int64_t i = threadIdx.x; i < w.cols; i += blockDim.x)
      q[i] = int8_t(s == 0.0f ? 0.0f
                              : fminf(127.0f, fmaxf(-127.0f,
                                                    roundf(__fdiv_rn(xr[i], s)))));
  }
}

/// Per 32-element block: one warp per block (grid-stride over warps).
__global__ void __launch_bounds__(256)
    wireEncodeBlocksKernel(const float *__restrict__ x,
                           uint8_t *__restrict__ out, int64_t rows,
                           kiln_wire_row w) {
  const int lane = threadIdx.x & 31;
  const int64_t perRow = w.cols / 32, total = rows * perRow;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x >> 5);
  for (int64_t b = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
       b < total; b += warps) {
    const int64_t r = b / perRow, k = b % perRow;
    const float v = x[r * w.cols + 32 * k + lane];
    const float d = __fdiv_rn(warpMax(fabsf(v)), 127.0f);
    uint8_t *row = out + r * w.bytes;
    if (lane == 0)
      reinterpret_cast<float *>(row)[k] = d;
    reinterpret_cast<int8_t *>(row + 4 * w.scales)[32 * k + lane] = int8_t(
        d == 0.0f ? 0.0f
                  : fminf(127.0f, fmaxf(-127.0f, roundf(__fdiv_rn(v, d)))));
  }
}

/// y [rows, cols] = q * scale from `rows` wire rows.
__global__ void __launch_bounds__(256)
    wireDecodeKernel(const uint8_t *__restrict__ in, float *__restrict__ y,
                     int64_t rows, kiln_wire_row w, float scale) {
  const int64_t total = rows * w.cols;
  const int64_t per = w.scales ? w.cols / w.scales : w.cols;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = e / w.cols, i = e % w.cols;
    const uint8_t *row = in + r * w.bytes;
    const float s =
        w.scales ? reinterpret_cast<const float *>(row)[i / per] : scale;
    y[e] = __fmul_rn(float(reinterpret_cast<const int8_t *>(
                         row + 4 * w.scales)[i]),
                     s);
  }
}
} // namespace kiln_cuda_detail

/// kiln.all_gather_rows with wire_quant (T = float only): the rank's shard
/// encoded after the padded blocks of the staging buffer, ncclAllGather of
/// c wire rows per rank (ncclInt8), then each rank's rows decoded into y.
/// Below the threshold y = x.
inline void kiln_cuda_all_gather_rows_q8(kiln_cuda_ctx *ctx, const float *x,
                                         float *y, int64_t n, int64_t cols,
                                         int64_t elem, int64_t min_tokens,
                                         int64_t wire, float scale,
                                         const char *what) {
  using namespace kiln_cuda_detail;
  if (skip(ctx))
    return;
  const int64_t N = ctx->tp_size;
  uint64_t have = 0;
  auto *staged = static_cast<uint8_t *>(kiln_cuda_gather_scratch(ctx, &have));
  if (!ctx->nccl || !kiln_sequence_split(n, N, min_tokens)) {
    copyRows(ctx, y, x, sizeof(float) * size_t(n * cols), staged, have);
    return;
  }
  (void)elem; // float rows: the signature's T
  if (!KILN_CUDA_ARG(ctx, kiln_wire_rule_valid(cols, wire, scale),
                     "kiln_cuda_all_gather_rows_q8",
                     "unsupported wire rule for these rows"))
    return;
  const kiln_wire_row w = kiln_wire_row_of(cols, wire);
  const int64_t c = (n + N - 1) / N;
  const size_t block = size_t(c * w.bytes);
  if (!KILN_CUDA_ARG(ctx, staged != nullptr && have >= block * size_t(N + 1),
                     "kiln_cuda_all_gather_rows_q8",
                     "the staging buffer is smaller than the padded shards"))
    return;
  const int64_t mine =
      kiln_sequence_shard_rows(n, N, ctx->tp_rank, min_tokens);
  uint8_t *send = staged + size_t(N) * block;
  if (mine > 0) {
    if (wire == KILN_WIRE_INT8_PER_BLOCK)
      wireEncodeBlocksKernel<<<gridFor(ctx, mine * (cols / 32) * 32, 256), 256,
                               0, streamOf(ctx)>>>(x, send, mine, w);
    else
      wireEncodeRowsKernel<<<unsigned(mine < 65535 ? mine : 65535), 256, 0,
                             streamOf(ctx)>>>(x, send, mine, w, scale);
    if (!KILN_CUDA_LAUNCHED(ctx, "wireEncode"))
      return;
  }
  if (!checkNccl(ctx,
                 ncclAllGather(send, staged, block, ncclInt8,
                               static_cast<ncclComm_t>(ctx->nccl),
                               streamOf(ctx)),
                 "ncclAllGather", what, __FILE__, __LINE__))
    return;
  for (int64_t r = 0; r < N; ++r) {
    const int64_t from = kiln_sequence_shard_start(n, N, r, min_tokens);
    const int64_t rows = kiln_sequence_shard_rows(n, N, r, min_tokens);
    if (rows == 0)
      continue;
    wireDecodeKernel<<<gridFor(ctx, rows * cols, 256), 256, 0,
                       streamOf(ctx)>>>(staged + size_t(r) * block,
                                        y + from * cols, rows, w, scale);
    if (!KILN_CUDA_LAUNCHED(ctx, "wireDecodeKernel"))
      return;
  }
}

namespace kiln_cuda_detail {
/// The add and norm of kiln_cuda_reduce_scatter_add_rms_norm, one block per
/// row: h[i] += residual[i] (rounded to T), then y[i] = rms_norm(h[i]) with
/// rmsNormKernel's arithmetic.
template <typename T>
__global__ void __launch_bounds__(256)
    addRmsNormKernel(T *h, const T *__restrict__ residual,
                     const T *__restrict__ w, T *y, int64_t n, int64_t dim,
                     float eps) {
  __shared__ float sh[32];
  for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
    T *hi = h + i * dim;
    const T *ri = residual + i * dim;
    T *yi = y + i * dim;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < dim; j += blockDim.x) {
      const T sum = fromF<T>(toF(hi[j]) + toF(ri[j]));
      hi[j] = sum;
      const float v = toF(sum);
      ss = fmaf(v, v, ss);
    }
    normRow(hi, w, yi, dim, blockSum(ss, sh), eps);
  }
}
} // namespace kiln_cuda_detail

/// Communication fusion (kiln.reduce_scatter_add_rms_norm): the reduce-
/// scatter of x [n, cols] written into h (the shard's rows; the all-reduce
/// below min_tokens), then one kernel adds residual into h and writes
/// y = rms_norm(h, w, eps).
template <typename T>
inline void kiln_cuda_reduce_scatter_add_rms_norm(
    kiln_cuda_ctx *ctx, const T *x, const T *residual, const T *w, T *h, T *y,
    int64_t n, int64_t cols, int64_t elem, int64_t min_tokens, float eps,
    const char *what) {
  using namespace kiln_cuda_detail;
  kiln_cuda_reduce_scatter(ctx, x, h, n, cols, elem, min_tokens, what);
  if (skip(ctx))
    return;
  const int64_t rows =
      kiln_sequence_shard_rows(n, ctx->tp_size, ctx->tp_rank, min_tokens);
  if (rows <= 0 || cols <= 0)
    return;
  const unsigned grid = unsigned(rows < 65535 ? rows : 65535);
  addRmsNormKernel<T><<<grid, 256, 0, streamOf(ctx)>>>(h, residual, w, y, rows,
                                                      cols, eps);
  KILN_CUDA_LAUNCHED(ctx, "kiln_cuda_reduce_scatter_add_rms_norm<<<>>>");
}

namespace kiln_cuda_detail {
/// One stage transfer of `count` elements: `nccl(peer, comm, stream)` is
/// the ncclSend or ncclRecv, called with the rank holding this rank's TP
/// shard of `peer_stage` in ctx->nccl_pipeline; without that communicator
/// an error naming `call` is recorded instead.
template <typename Nccl>
inline void stageTransfer(kiln_cuda_ctx *ctx, int64_t count,
                          int64_t peer_stage, const char *call,
                          const char *ncclName, const char *what, Nccl nccl) {
  if (skip(ctx) || count == 0)
    return;
  if (!KILN_CUDA_ARG(ctx, ctx->nccl_pipeline != nullptr, call,
                     "a pipeline stage's program runs in its job (mpirun; "
                     "no pipeline communicator)"))
    return;
  const int peer = int(peer_stage) * ctx->tp_size + ctx->tp_rank;
  checkNccl(ctx,
            nccl(peer, static_cast<ncclComm_t>(ctx->nccl_pipeline),
                 streamOf(ctx)),
            ncclName, what, __FILE__, __LINE__);
}
} // namespace kiln_cuda_detail

/// kiln.send / kiln.recv of a pipeline stage (GPipe, Huang et al. 2019):
/// x / y [rows, cols] goes to / comes from the rank holding the same tensor-
/// parallel shard of stage `peer_stage` (rank peer_stage * tp + tp_rank of
/// ctx->nccl_pipeline, the communicator over every rank of the job), with
/// ncclSend / ncclRecv on ctx->stream. Enqueued only; a peer that never
/// posts the matching call is caught by the executor's deadline like a
/// missing all-reduce. Without ctx->nccl_pipeline (a stage program run
/// alone) the call records an error naming the transfer.
template <typename T>
inline void kiln_cuda_send(kiln_cuda_ctx *ctx, const T *x, int64_t rows,
                           int64_t cols, int64_t elem, int64_t peer_stage,
                           const char *what) {
  (void)elem;
  const size_t n = size_t(rows * cols);
  kiln_cuda_detail::stageTransfer(
      ctx, rows * cols, peer_stage, "kiln_cuda_send", "ncclSend", what,
      [&](int peer, ncclComm_t comm, cudaStream_t stream) {
        return ncclSend(x, n, kiln_cuda_detail::ncclTypeOf<T>(), peer, comm,
                        stream);
      });
}

template <typename T>
inline void kiln_cuda_recv(kiln_cuda_ctx *ctx, T *y, int64_t rows,
                           int64_t cols, int64_t elem, int64_t peer_stage,
                           const char *what) {
  (void)elem;
  const size_t n = size_t(rows * cols);
  kiln_cuda_detail::stageTransfer(
      ctx, rows * cols, peer_stage, "kiln_cuda_recv", "ncclRecv", what,
      [&](int peer, ncclComm_t comm, cudaStream_t stream) {
        return ncclRecv(y, n, kiln_cuda_detail::ncclTypeOf<T>(), peer, comm,
                        stream);
      });
}

#endif // KILN_CODEGEN_CUDA_KILNCUDACOMM_CUH
