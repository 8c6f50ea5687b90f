//===- Comm.cpp - This process's tensor-parallel group --------------------===//
#include "comm/Comm.h"

#include "base/LibraryPath.h"
#include "cpu/Kernels.h"
#include "kiln_rt/kernel_abi.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

namespace kiln::rt {

namespace {

Status commStatus(int32_t code, const kiln_comm_error_t &err) {
  return backendStatus(code, err.message, sizeof(err.message),
                       "communication error " + std::to_string(code));
}

/// KILN_COMM_TIMEOUT_S (seconds, default 30) in milliseconds, or -1 when
/// it is not a positive finite number.
int64_t timeoutFromEnvironment(std::string &text) {
  const char *env = std::getenv("KILN_COMM_TIMEOUT_S");
  if (!env || !*env)
    return 30000;
  text = env;
  char *end = nullptr;
  errno = 0;
  double s = std::strtod(env, &end);
  if (errno || *end != '\0' || !(s >= 0.1) || !std::isfinite(s) || s > 86400)
    return -1;
  return std::max<int64_t>(1, int64_t(s * 1000.0));
}

std::mutex groupMutex;
std::unique_ptr<Communicator> group;
Status groupError; // a failed join, repeated to later callers
bool joined = false;

} // namespace

Status Communicator::allReduceSum(void *buf, int64_t count, int32_t elem,
                                  const char *what) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(
      api_->all_reduce_sum(buf, count, elem, what, timeoutMs_, &err), err);
}

Status Communicator::allGather(const void *send, void *recv, int64_t bytes,
                               const char *what, bool tpGroup) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(
      api_->all_gather(send, recv, bytes,
                       tpGroup ? KILN_COMM_SCOPE_TP : KILN_COMM_SCOPE_WORLD,
                       what, timeoutMs_, &err),
      err);
}

Status Communicator::reduceScatterSum(const void *send, void *recv,
                                      const int64_t *counts, int32_t elem,
                                      const char *what) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(api_->reduce_scatter_sum(send, recv, counts, elem, what,
                                             timeoutMs_, &err),
                    err);
}

Status Communicator::allGatherV(const void *send, void *recv,
                                const int64_t *bytes, const char *what) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(
      api_->all_gather_v(send, recv, bytes, what, timeoutMs_, &err), err);
}

Status Communicator::setPipeline(int32_t tp, int32_t pp) {
  if (tp < 1 || pp < 1 || int64_t(tp) * pp != size_)
    return failedPrecondition(
        "the artifact runs as " + std::to_string(int64_t(tp) * pp) +
        " ranks (tp " + std::to_string(tp) + " x pp " + std::to_string(pp) +
        ") but the job has " + std::to_string(size_));
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  KILN_RT_RETURN_IF_ERROR(commStatus(api_->set_tp_group(tp, &err), err));
  tp_ = tp;
  pp_ = pp;
  return Status::ok();
}

Status Communicator::send(const void *buf, int64_t bytes, int32_t peer,
                          const char *what) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(api_->send(buf, bytes, peer, what, timeoutMs_, &err), err);
}

Status Communicator::recv(void *buf, int64_t bytes, int32_t peer,
                          const char *what) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(api_->recv(buf, bytes, peer, what, timeoutMs_, &err), err);
}

Status Communicator::broadcast(void *buf, int64_t bytes, int32_t root,
                               const char *what, bool bounded) {
  std::lock_guard<std::mutex> lock(mu_);
  kiln_comm_error_t err{};
  return commStatus(api_->broadcast(buf, bytes, root, what,
                                    bounded ? timeoutMs_ : 0, &err),
                    err);
}

void Communicator::abort(const std::string &message, int32_t code) {
  api_->abort(message.c_str(), code);
  std::_Exit(code); // abort does not return; in case a backend does
}

void Communicator::finalize() {
  std::lock_guard<std::mutex> lock(mu_);
  api_->finalize();
}

bool launchedAsRank() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE"})
    if (const char *v = std::getenv(name); v && *v)
      return true;
  return false;
}

Communicator *processGroup() {
  std::lock_guard<std::mutex> lock(groupMutex);
  return group.get();
}

Status joinGroup(Communicator *&out) {
  std::lock_guard<std::mutex> lock(groupMutex);
  out = group.get();
  if (joined)
    return groupError;
  joined = true;
  auto failWith = [&](Status s) {
    groupError = s;
    return s;
  };
  std::string timeoutText;
  int64_t timeoutMs = timeoutFromEnvironment(timeoutText);
  if (timeoutMs < 0)
    return failWith(invalidArgument(
        "KILN_COMM_TIMEOUT_S='" + timeoutText +
        "' is not a number of seconds in [0.1, 86400]"));
  // KILN_RUNTIME_COMM_LIBRARY overrides the path (tests, relocated installs).
  const char *env = std::getenv("KILN_RUNTIME_COMM_LIBRARY");
  std::string path =
      env && *env ? env : runtimeDirectory() + "/libkiln_comm_mpi.so";
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return failWith(Status(
        KILN_RT_NOT_FOUND,
        "tensor-parallel runs need the MPI communicator " + path +
            ", which is missing: this runtime was built without Open MPI "
            "(install openmpi-bin and libopenmpi-dev, then rebuild)"));
  dlerror();
  // RTLD_GLOBAL: Open MPI loads its own components with dlopen and expects
  // libmpi's symbols to be visible to them.
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    const char *e = dlerror();
    return failWith(internalError("cannot load " + path + ": " +
                                  (e ? e : "unknown dlopen error")));
  }
  auto get = reinterpret_cast<kiln_comm_get_api_fn>(
      dlsym(handle, "kiln_comm_get_api"));
  const kiln_comm_api_t *api = get ? get() : nullptr;
  if (!api)
    return failWith(
        internalError(path + " does not export kiln_comm_get_api"));
  if (api->interface_version != KILN_COMM_INTERFACE_VERSION ||
      api->struct_size < sizeof(kiln_comm_api_t))
    return failWith(internalError(
        path + " implements communication interface version " +
        std::to_string(api->interface_version) + ", expected " +
        std::to_string(KILN_COMM_INTERFACE_VERSION) +
        " (mismatched runtime libraries)"));
  int32_t rank = 0, size = 0;
  kiln_comm_error_t err{};
  if (Status s = commStatus(api->init(&rank, &size, &err), err); !s.isOk())
    return failWith(s);
  group = std::make_unique<Communicator>(api, rank, size, timeoutMs);
  out = group.get();
  return Status::ok();
}

} // namespace kiln::rt

using kiln::rt::Communicator;

extern "C" void kiln_k_all_reduce(kiln_exec_ctx *ctx, const void *x, void *y,
                                  int64_t count, int64_t elem,
                                  const char *what) {
  const size_t bytes = size_t(count) * (elem == KILN_ELEM_F32 ? 4 : 2);
  if (x != y)
    std::memcpy(y, x, bytes);
  auto *comm = static_cast<Communicator *>(ctx->comm);
  if (!comm || comm->groupSize() == 1 || count == 0)
    return;
  kiln::rt::Status s = comm->allReduceSum(y, count, int32_t(elem), what);
  if (!s.isOk())
    comm->abort(s.message(), 1);
}

extern "C" void kiln_k_all_gather(kiln_exec_ctx *ctx, const void *x, void *y,
                                  int64_t rows, int64_t cols, int64_t elem,
                                  const char *what) {
  const size_t elemBytes = elem == KILN_ELEM_F32 ? 4 : 2;
  const size_t block = size_t(rows) * size_t(cols) * elemBytes;
  auto *comm = static_cast<Communicator *>(ctx->comm);
  if (!comm || comm->groupSize() == 1) {
    if (x != y)
      std::memcpy(y, x, block);
    return;
  }
  const size_t ranks = size_t(comm->groupSize());
  // One row: the ranks' blocks are already side by side. Several (the
  // batched step's sequences): gather [ranks][rows][cols], then interleave.
  thread_local std::vector<uint8_t> scratch;
  uint8_t *into = static_cast<uint8_t *>(y);
  if (rows != 1) {
    scratch.resize(ranks * block);
    into = scratch.data();
  }
  kiln::rt::Status s =
      comm->allGather(x, into, int64_t(block), what ? what : "all-gather",
                      /*tpGroup=*/true);
  if (!s.isOk())
    comm->abort(s.message(), 1);
  if (rows == 1)
    return;
  const size_t rowBytes = size_t(cols) * elemBytes;
  auto *out = static_cast<uint8_t *>(y);
  for (size_t k = 0; k < ranks; ++k)
    for (size_t r = 0; r < size_t(rows); ++r)
      std::memcpy(out + (r * ranks + k) * rowBytes,
                  scratch.data() + k * block + r * rowBytes, rowBytes);
}

namespace {
/// The sequence shards of `rows` rows over the group of `comm` (NULL: one
/// rank), in `unit` units per row (kiln_rt/sequence_shard.h).
struct SequenceShards {
  bool split = false;
  int64_t group = 1, rank = 0, start = 0, rows = 0;
  std::vector<int64_t> units; ///< per rank of the group
  SequenceShards(const Communicator *comm, int64_t n, int64_t minTokens,
                 int64_t unit) {
    group = comm ? comm->groupSize() : 1;
    rank = comm ? comm->tpRank() : 0;
    split = kiln_sequence_split(n, group, minTokens);
    start = kiln_sequence_shard_start(n, group, rank, minTokens);
    rows = kiln_sequence_shard_rows(n, group, rank, minTokens);
    if (split)
      for (int64_t r = 0; r < group; ++r)
        units.push_back(kiln_sequence_shard_rows(n, group, r, minTokens) *
                        unit);
  }
};
size_t elemBytesOf(int64_t elem) { return elem == KILN_ELEM_F32 ? 4 : 2; }

/// MPI wants distinct send and receive buffers: `send` (sendBytes) itself,
/// or a per-thread copy of it when it overlaps `recv` (recvBytes).
const void *apartFrom(const void *send, size_t sendBytes, const void *recv,
                      size_t recvBytes) {
  thread_local std::vector<uint8_t> staged;
  const auto *s = static_cast<const uint8_t *>(send);
  const auto *r = static_cast<const uint8_t *>(recv);
  if (s >= r + recvBytes || r >= s + sendBytes)
    return send;
  staged.assign(s, s + sendBytes);
  return staged.data();
}
} // namespace

extern "C" int64_t kiln_k_sequence_rows(kiln_exec_ctx *ctx, int64_t n,
                                        int64_t min_tokens) {
  auto *comm = static_cast<Communicator *>(ctx->comm);
  return SequenceShards(comm, n, min_tokens, 1).rows;
}

extern "C" void kiln_k_reduce_scatter(kiln_exec_ctx *ctx, const void *x,
                                      void *y, int64_t rows, int64_t cols,
                                      int64_t elem, int64_t min_tokens,
                                      const char *what) {
  auto *comm = static_cast<Communicator *>(ctx->comm);
  SequenceShards shards(comm, rows, min_tokens, cols);
  if (!shards.split) { // plain tensor parallelism: the all-reduce
    kiln_k_all_reduce(ctx, x, y, rows * cols, elem, what);
    return;
  }
  // The memory plan may give the op one buffer (as it does an all-reduce).
  const size_t bytes = size_t(rows * cols) * elemBytesOf(elem);
  x = apartFrom(x, bytes, y, bytes);
  kiln::rt::Status s = comm->reduceScatterSum(
      x, y, shards.units.data(), int32_t(elem), what ? what : "reduce-scatter");
  if (!s.isOk())
    comm->abort(s.message(), 1);
}

extern "C" void kiln_k_reduce_scatter_add_rms_norm(
    kiln_exec_ctx *ctx, const void *x, const void *residual, const void *w,
    void *h, void *y, int64_t rows, int64_t cols, int64_t elem,
    int64_t min_tokens, float eps, const char *what) {
  kiln_k_reduce_scatter(ctx, x, h, rows, cols, elem, min_tokens, what);
  const int64_t n = kiln_k_sequence_rows(ctx, rows, min_tokens);
  const size_t count = size_t(n * cols);
  // The add over the shard, then kiln_k_rms_norm's arithmetic over it.
  if (elem == KILN_ELEM_F32) {
    float *sum = static_cast<float *>(h);
    const float *res = static_cast<const float *>(residual);
    for (size_t i = 0; i < count; ++i)
      sum[i] += res[i];
    kiln_k_rms_norm(sum, static_cast<const float *>(w),
                    static_cast<float *>(y), n, cols, eps);
    return;
  }
  auto *sum = static_cast<uint16_t *>(h);
  const auto *res = static_cast<const uint16_t *>(residual);
  if (elem == KILN_ELEM_F16) {
    for (size_t i = 0; i < count; ++i)
      sum[i] = kiln_float_to_f16(kiln_f16_to_float(sum[i]) +
                                 kiln_f16_to_float(res[i]));
    kiln_k_rms_norm_f16(sum, static_cast<const kiln_f16_t *>(w),
                        static_cast<kiln_f16_t *>(y), n, cols, eps);
    return;
  }
  for (size_t i = 0; i < count; ++i)
    sum[i] = kiln_float_to_bf16(kiln_bf16_to_float(sum[i]) +
                                kiln_bf16_to_float(res[i]));
  kiln_k_rms_norm_bf16(sum, static_cast<const kiln_bf16_t *>(w),
                       static_cast<kiln_bf16_t *>(y), n, cols, eps);
}

extern "C" void kiln_k_all_slice(kiln_exec_ctx *ctx, const void *x, void *y,
                                 int64_t rows, int64_t cols, int64_t elem,
                                 int64_t min_tokens, const char *what) {
  (void)what;
  auto *comm = static_cast<Communicator *>(ctx->comm);
  SequenceShards shards(comm, rows, min_tokens, cols);
  const size_t rowBytes = size_t(cols) * elemBytesOf(elem);
  const auto *from = static_cast<const uint8_t *>(x) + size_t(shards.start) * rowBytes;
  if (from != y)
    std::memmove(y, from, size_t(shards.rows) * rowBytes);
}

extern "C" void kiln_k_all_gather_rows(kiln_exec_ctx *ctx, const void *x,
                                       void *y, int64_t rows, int64_t cols,
                                       int64_t elem, int64_t min_tokens,
                                       const char *what) {
  auto *comm = static_cast<Communicator *>(ctx->comm);
  const size_t rowBytes = size_t(cols) * elemBytesOf(elem);
  SequenceShards shards(comm, rows, min_tokens, int64_t(rowBytes));
  if (!shards.split) {
    if (x != y)
      std::memmove(y, x, size_t(rows) * rowBytes);
    return;
  }
  // The shard may sit where the rank's rows of the result go (the memory
  // plan reuses buffers).
  const void *send = apartFrom(x, size_t(shards.rows) * rowBytes, y,
                               size_t(rows) * rowBytes);
  kiln::rt::Status s = comm->allGatherV(send, y, shards.units.data(),
                                        what ? what : "all-gather of rows");
  if (!s.isOk())
    comm->abort(s.message(), 1);
}

namespace {
/// x [rows, cols] float32 -> wire rows (the readers' quantizers, so that
/// re-quantizing the dequantized rows gives the same codes).
void encodeWireRows(const float *x, int64_t rows, const kiln_wire_row &w,
                    int64_t wire, float scale, uint8_t *out) {
  std::vector<int32_t> s4(size_t(w.cols / 4));
  std::vector<float> s16(size_t(w.cols / 16));
  for (int64_t t = 0; t < rows; ++t) {
    uint8_t *row = out + size_t(t * w.bytes);
    auto *d = reinterpret_cast<float *>(row);
    auto *q = reinterpret_cast<int8_t *>(row + 4 * w.scales);
    const float *xr = x + t * w.cols;
    if (wire == KILN_WIRE_INT8_PER_BLOCK)
      kiln::rt::cpu::quantizeA8Row(xr, w.cols, q, d, s4.data(), s16.data());
    else if (wire == KILN_WIRE_INT8_PER_TOKEN)
      d[0] = kiln::rt::cpu::quantizeActivationRow(xr, q, w.cols, 0.0f);
    else
      kiln::rt::cpu::quantizeActivationRow(xr, q, w.cols, scale);
  }
}

/// Wire rows -> y [rows, cols] float32: y = q * scale.
void decodeWireRows(const uint8_t *in, int64_t rows, const kiln_wire_row &w,
                    float scale, float *y) {
  for (int64_t t = 0; t < rows; ++t) {
    const uint8_t *row = in + size_t(t * w.bytes);
    const auto *d = reinterpret_cast<const float *>(row);
    const auto *q = reinterpret_cast<const int8_t *>(row + 4 * w.scales);
    float *yr = y + t * w.cols;
    const int64_t per = w.scales ? w.cols / w.scales : w.cols;
    for (int64_t i = 0; i < w.cols; ++i)
      yr[i] = float(q[i]) * (w.scales ? d[i / per] : scale);
  }
}
} // namespace

extern "C" void kiln_k_all_gather_rows_q8(kiln_exec_ctx *ctx, const void *x,
                                          void *y, int64_t rows, int64_t cols,
                                          int64_t elem, int64_t min_tokens,
                                          int64_t wire, float scale,
                                          const char *what) {
  auto *comm = static_cast<Communicator *>(ctx->comm);
  const char *name = what ? what : "8-bit all-gather of rows";
  if (elem != KILN_ELEM_F32 || !kiln_wire_rule_valid(cols, wire, scale)) {
    std::string message = std::string("kiln_k_all_gather_rows_q8 '") + name +
                          "': unsupported wire rule " + std::to_string(wire) +
                          " for " + std::to_string(cols) +
                          " columns of element type " + std::to_string(elem);
    if (comm)
      comm->abort(message, 1);
    std::fprintf(stderr, "kiln: %s\n", message.c_str());
    std::_Exit(1);
  }
  const kiln_wire_row w = kiln_wire_row_of(cols, wire);
  SequenceShards shards(comm, rows, min_tokens, w.bytes);
  if (!shards.split) {
    if (x != y)
      std::memmove(y, x, size_t(rows * cols) * sizeof(float));
    return;
  }
  thread_local std::vector<uint8_t> sent, received;
  sent.resize(size_t(shards.rows * w.bytes));
  received.resize(size_t(rows * w.bytes));
  encodeWireRows(static_cast<const float *>(x), shards.rows, w, wire, scale,
                 sent.data());
  kiln::rt::Status s =
      comm->allGatherV(sent.data(), received.data(), shards.units.data(), name);
  if (!s.isOk())
    comm->abort(s.message(), 1);
  decodeWireRows(received.data(), rows, w, scale, static_cast<float *>(y));
}

/// kiln_k_send (`send`) / kiln_k_recv: [rows, cols] of `elem` to or from
/// the rank of pipeline `stage` with this rank's tp rank; any failure ends
/// the job.
static void stageTransfer(kiln_exec_ctx *ctx, bool send, void *buf,
                          int64_t rows, int64_t cols, int64_t elem,
                          int64_t stage, const char *what) {
  const char *call = send ? "kiln_k_send" : "kiln_k_recv";
  auto *comm = static_cast<Communicator *>(ctx->comm);
  if (!comm) {
    std::fprintf(stderr,
                 "kiln: %s '%s': a pipeline stage's program runs only as a "
                 "rank of its pipeline (mpirun)\n",
                 call, what ? what : "");
    std::_Exit(1);
  }
  if (stage < 0 || stage >= comm->ppSize() || stage == comm->stage())
    comm->abort(std::string(call) + " '" + (what ? what : "") + "': stage " +
                    std::to_string(stage) + " is not another stage of the " +
                    std::to_string(comm->ppSize()) + "-stage pipeline",
                1);
  const int64_t bytes = rows * cols * (elem == KILN_ELEM_F32 ? 4 : 2);
  const int32_t peer = comm->rankOfStage(stage);
  const char *name = what ? what : "activations";
  kiln::rt::Status s = send ? comm->send(buf, bytes, peer, name)
                            : comm->recv(buf, bytes, peer, name);
  if (!s.isOk())
    comm->abort(s.message(), 1);
}

extern "C" void kiln_k_send(kiln_exec_ctx *ctx, const void *x, int64_t rows,
                            int64_t cols, int64_t elem, int64_t dest_stage,
                            const char *what) {
  stageTransfer(ctx, /*send=*/true, const_cast<void *>(x), rows, cols, elem,
                dest_stage, what);
}

extern "C" void kiln_k_recv(kiln_exec_ctx *ctx, void *y, int64_t rows,
                            int64_t cols, int64_t elem, int64_t source_stage,
                            const char *what) {
  stageTransfer(ctx, /*send=*/false, y, rows, cols, elem, source_stage, what);
}
