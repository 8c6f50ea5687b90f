//===- CommMpiCheck.cpp - kiln-comm-mpi-check -------------------*- C++ -*-===//
//
// Checks libkiln_comm_mpi.so (CommBackend.h) through its C table, run as
// every rank of `mpirun -np N`:
//
//   kiln-comm-mpi-check [LIB]
//     all-reduce sums of f32 (small integers: exact), f16 and bf16 (each
//     element's float32 sum is exact, so the expected bits are that sum
//     rounded once; covers ties, subnormals, overflow to infinity, inf and
//     NaN inputs), a count of 0, a broadcast from the last rank, an
//     all-gather, and argument errors. Prints `comm-mpi: rank R of N: ok`
//     and exits 0, or prints each mismatch and exits 1.
//
//   kiln-comm-mpi-check [LIB] --hang-rank K --timeout-ms T
//     Rank K sleeps 10 * T ms instead of joining an all-reduce; every other
//     rank must get the timeout error after about T ms, prints it, and
//     aborts the job with it (api->abort, code 3). If rank K wakes up, the
//     abort failed: it says so ("still alive") on stderr and exits 1.
//
// LIB defaults to the libkiln_comm_mpi.so of this build. Set
// KILN_COMM_MPI_MAX_CHUNK (e.g. 1000) to run every collective in chunks.
//
//===----------------------------------------------------------------------===//
#include "comm/CommBackend.h"

#include "kiln_rt/api.h"
#include "kiln_rt/kernel_abi.h"

#include <dlfcn.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

const kiln_comm_api_t *api = nullptr;
int32_t rank = -1, size = 0;
int failures = 0;
constexpr int64_t kTimeoutMs = 30000;

void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void fail(const char *fmt, ...) {
  char text[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof(text), fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "comm-mpi: rank %d of %d: FAIL: %s\n", rank, size,
               text);
  ++failures;
}

/// An unexpected error from a collective: the ranks may now disagree on the
/// sequence of collectives, so end the job.
void mustSucceed(int32_t rc, const kiln_comm_error_t &err, const char *what) {
  if (rc == 0)
    return;
  std::string msg = std::string("comm-mpi check: ") + what + " failed (code " +
                    std::to_string(rc) + "): " + err.message;
  api->abort(msg.c_str(), 2);
}

double nowMs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
}

// ---- f32 -----------------------------------------------------------------

float f32Value(int r, int64_t i) {
  return float((int(i % 251) - 125) * (r + 1) + r);
}

void checkF32() {
  const int64_t n = 100003;
  std::vector<float> buf(n);
  for (int64_t i = 0; i < n; ++i)
    buf[i] = f32Value(rank, i);
  kiln_comm_error_t err{};
  mustSucceed(api->all_reduce_sum(buf.data(), n, KILN_ELEM_F32, "check.f32",
                                  kTimeoutMs, &err),
              err, "all-reduce f32");
  int bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < size; ++r)
      want += f32Value(r, i);
    if (buf[i] != want && bad++ < 5)
      fail("all-reduce f32 [%lld] = %g, want %g", (long long)i, buf[i], want);
  }
}

// ---- f16 / bf16 ------------------------------------------------------------
//
// Element i of rank r: every rank's value of one element lies in one class
// (by i % 8), chosen so that the float32 sum over ranks is exact in any
// order (few significant bits, close exponents, or specials).

uint16_t f16Value(int r, int64_t i) {
  int64_t k = i / 8;
  uint16_t sign = ((i + r) % 3 == 0) ? 0x8000 : 0;
  switch (i % 8) {
  case 0: case 1: case 2: { // normal, exponent -10..9: ties and carries
    int e = int(k % 20) - 10;
    int mant = int((k * 7 + r * 13 + i) % 1024);
    return uint16_t(sign | ((e + 15) << 10) | mant);
  }
  case 3: // subnormal (the sum may become normal)
    return uint16_t(sign | (1 + (k * 5 + r * 3) % 1023));
  case 4: // large positive: the sum of two overflows to infinity
    return uint16_t((30 << 10) | ((k + r * 91) % 1024));
  case 5: // 65504 region with mixed signs
    return uint16_t(sign | (30 << 10) | (1023 - (k + r) % 4));
  case 6: // infinities: rank 0 +inf; rank 1 -inf on odd k (then NaN)
    if (r == 0)
      return 0x7c00;
    if (r == 1 && (k & 1))
      return 0xfc00;
    return uint16_t(0x3c00 + r);
  default: // NaN from the last rank on even k, else small integers
    if (r == size - 1 && (k & 1) == 0)
      return 0x7e00;
    return kiln_float_to_f16(float(r + 1) * (k % 2 ? -1.f : 1.f));
  }
}

uint16_t bf16Value(int r, int64_t i) {
  int64_t k = i / 8;
  uint16_t sign = ((i + r) % 3 == 0) ? 0x8000 : 0;
  switch (i % 8) {
  case 0: case 1: case 2: { // normal, exponent -60..59
    int e = int(k % 120) - 60;
    int mant = int((k * 7 + r * 13 + i) % 128);
    return uint16_t(sign | ((e + 127) << 7) | mant);
  }
  case 3: // float32 subnormal range (bf16 keeps float's exponent)
    return uint16_t(sign | (1 + (k * 5 + r * 3) % 127));
  case 4: // near FLT_MAX, positive: the sum overflows to infinity
    return uint16_t((254 << 7) | ((k + r * 19) % 128));
  case 5: // tiny normals with mixed signs
    return uint16_t(sign | (1 << 7) | ((k + r) % 128));
  case 6:
    if (r == 0)
      return 0x7f80;
    if (r == 1 && (k & 1))
      return 0xff80;
    return uint16_t(0x3f80 + r);
  default:
    if (r == size - 1 && (k & 1) == 0)
      return 0x7fc0;
    return kiln_float_to_bf16(float(r + 1) * (k % 2 ? -1.f : 1.f));
  }
}

void check16(int32_t elem) {
  const bool f16 = elem == KILN_ELEM_F16;
  const char *name = f16 ? "f16" : "bf16";
  const int64_t n = 8 * 2503;
  auto value = [&](int r, int64_t i) {
    return f16 ? f16Value(r, i) : bf16Value(r, i);
  };
  auto widen = [&](uint16_t h) {
    return f16 ? kiln_f16_to_float(h) : kiln_bf16_to_float(h);
  };
  auto narrow = [&](float x) {
    return f16 ? kiln_float_to_f16(x) : kiln_float_to_bf16(x);
  };
  std::vector<uint16_t> buf(n);
  for (int64_t i = 0; i < n; ++i)
    buf[i] = value(rank, i);
  kiln_comm_error_t err{};
  std::string what = std::string("check.") + name;
  mustSucceed(api->all_reduce_sum(buf.data(), n, elem, what.c_str(),
                                  kTimeoutMs, &err),
              err, f16 ? "all-reduce f16" : "all-reduce bf16");
  int bad = 0, rounded = 0, nans = 0, infs = 0;
  for (int64_t i = 0; i < n; ++i) {
    float sum = 0;
    for (int r = 0; r < size; ++r)
      sum += widen(value(r, i));
    uint16_t want = narrow(sum);
    bool ok = std::isnan(sum) ? std::isnan(widen(buf[i])) : buf[i] == want;
    if (!ok && bad++ < 5)
      fail("all-reduce %s [%lld] = 0x%04x, want 0x%04x (float32 sum %a)",
           name, (long long)i, buf[i], want, double(sum));
    rounded += !std::isnan(sum) && widen(want) != sum;
    nans += std::isnan(sum);
    infs += std::isinf(widen(want));
  }
  // The data must exercise what the file comment promises.
  if (size > 1 && (rounded == 0 || nans == 0 || infs == 0))
    fail("all-reduce %s: test data has %d rounded, %d NaN, %d inf sums", name,
         rounded, nans, infs);
}

// ---- count 0, broadcast, all-gather, errors --------------------------------

void checkEmpty() {
  float sentinel[2] = {42.f, -7.f};
  kiln_comm_error_t err{};
  mustSucceed(api->all_reduce_sum(sentinel, 0, KILN_ELEM_F32, "check.empty",
                                  kTimeoutMs, &err),
              err, "all-reduce of 0 elements");
  mustSucceed(api->all_reduce_sum(nullptr, 0, KILN_ELEM_BF16, "check.empty",
                                  kTimeoutMs, &err),
              err, "all-reduce of 0 elements (null)");
  if (sentinel[0] != 42.f || sentinel[1] != -7.f)
    fail("all-reduce of 0 elements wrote the buffer");
  mustSucceed(api->broadcast(nullptr, 0, 0, "check.empty", kTimeoutMs, &err),
              err, "broadcast of 0 bytes");
  mustSucceed(api->all_gather(nullptr, nullptr, 0, KILN_COMM_SCOPE_WORLD, "check.empty", kTimeoutMs,
                              &err),
              err, "all-gather of 0 bytes");
}

uint8_t bcastByte(int root, int64_t i) {
  return uint8_t((i * 31 + 7) ^ (root * 101));
}

void checkBroadcast() {
  const int root = size - 1; // non-zero whenever there are several ranks
  const int64_t n = 1000003;
  std::vector<uint8_t> buf(n);
  for (int64_t i = 0; i < n; ++i)
    buf[i] = rank == root ? bcastByte(root, i) : uint8_t(0xa5 ^ rank);
  kiln_comm_error_t err{};
  mustSucceed(api->broadcast(buf.data(), n, root, "check.broadcast",
                             kTimeoutMs, &err),
              err, "broadcast");
  int bad = 0;
  for (int64_t i = 0; i < n; ++i)
    if (buf[i] != bcastByte(root, i) && bad++ < 5)
      fail("broadcast from rank %d [%lld] = %u, want %u", root, (long long)i,
           buf[i], bcastByte(root, i));
}

uint8_t gatherByte(int r, int64_t j) { return uint8_t(r * 37 + j * 11 + 1); }

void checkAllGather() {
  const int64_t n = 4099;
  std::vector<uint8_t> send(n), recv(size_t(n) * size, 0xee);
  for (int64_t j = 0; j < n; ++j)
    send[j] = gatherByte(rank, j);
  kiln_comm_error_t err{};
  mustSucceed(api->all_gather(send.data(), recv.data(), n, KILN_COMM_SCOPE_WORLD, "check.gather",
                              kTimeoutMs, &err),
              err, "all-gather");
  int bad = 0;
  for (int r = 0; r < size; ++r)
    for (int64_t j = 0; j < n; ++j)
      if (recv[size_t(r) * n + j] != gatherByte(r, j) && bad++ < 5)
        fail("all-gather: block of rank %d [%lld] = %u, want %u", r,
             (long long)j, recv[size_t(r) * n + j], gatherByte(r, j));
}

/// Sequence parallelism: a reduce-scatter of f32 and bf16 rows with
/// uneven counts (rank r keeps 3 + r rows of 5 elements; exact integer
/// sums), and an all-gather of uneven byte blocks (rank r sends 100 + 7 r
/// bytes).
void checkSequenceCollectives() {
  const int64_t cols = 5;
  std::vector<int64_t> counts(static_cast<size_t>(size)),
      bytes(static_cast<size_t>(size));
  int64_t total = 0, offset = 0;
  for (int r = 0; r < size; ++r) {
    counts[size_t(r)] = (3 + r) * cols;
    bytes[size_t(r)] = 100 + 7 * r;
    if (r < rank)
      offset += counts[size_t(r)];
    total += counts[size_t(r)];
  }
  auto term = [](int r, int64_t i) { return float((r + 1) * 3 + i % 17); };
  kiln_comm_error_t err{};
  {
    std::vector<float> send(static_cast<size_t>(total)),
        recv(static_cast<size_t>(counts[rank]), -1.0f);
    for (int64_t i = 0; i < total; ++i)
      send[size_t(i)] = term(rank, i);
    mustSucceed(api->reduce_scatter_sum(send.data(), recv.data(), counts.data(),
                                        KILN_ELEM_F32, "check.rs", kTimeoutMs,
                                        &err),
                err, "reduce-scatter f32");
    int bad = 0;
    for (int64_t i = 0; i < counts[rank]; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r)
        want += term(r, offset + i);
      if (recv[size_t(i)] != want && bad++ < 5)
        fail("reduce-scatter f32 [%lld] = %g, want %g", (long long)i,
             double(recv[size_t(i)]), double(want));
    }
  }
  {
    std::vector<uint16_t> send(static_cast<size_t>(total)),
        recv(static_cast<size_t>(counts[rank]), 0);
    for (int64_t i = 0; i < total; ++i)
      send[size_t(i)] = kiln_float_to_bf16(term(rank, i));
    mustSucceed(api->reduce_scatter_sum(send.data(), recv.data(), counts.data(),
                                        KILN_ELEM_BF16, "check.rs16",
                                        kTimeoutMs, &err),
                err, "reduce-scatter bf16");
    int bad = 0;
    for (int64_t i = 0; i < counts[rank]; ++i) {
      float want = 0;
      for (int r = 0; r < size; ++r)
        want += term(r, offset + i);
      if (recv[size_t(i)] != kiln_float_to_bf16(want) && bad++ < 5)
        fail("reduce-scatter bf16 [%lld] = 0x%04x, want %g", (long long)i,
             recv[size_t(i)], double(want));
    }
  }
  {
    int64_t all = 0;
    for (int64_t b : bytes)
      all += b;
    std::vector<uint8_t> send(static_cast<size_t>(bytes[rank])),
        recv(static_cast<size_t>(all), 0xee);
    for (int64_t j = 0; j < bytes[rank]; ++j)
      send[size_t(j)] = gatherByte(rank, j);
    mustSucceed(api->all_gather_v(send.data(), recv.data(), bytes.data(),
                                  "check.gatherv", kTimeoutMs, &err),
                err, "all-gather-v");
    int bad = 0;
    int64_t at = 0;
    for (int r = 0; r < size; ++r)
      for (int64_t j = 0; j < bytes[size_t(r)]; ++j, ++at)
        if (recv[size_t(at)] != gatherByte(r, j) && bad++ < 5)
          fail("all-gather-v: rank %d's byte %lld = %u, want %u", r,
               (long long)j, recv[size_t(at)], gatherByte(r, j));
  }
}

/// Pipeline transfers: ranks 2k and 2k + 1 swap 70000 bytes (two chunks
/// with KILN_COMM_MPI_MAX_CHUNK), the even one sending first.
void checkPointToPoint() {
  const int32_t peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  if (peer >= size)
    return;
  const int64_t n = 70000;
  std::vector<uint8_t> out(n), in(n, 0xee);
  for (int64_t j = 0; j < n; ++j)
    out[j] = gatherByte(rank, j);
  kiln_comm_error_t err{};
  auto sendIt = [&] {
    mustSucceed(api->send(out.data(), n, peer, "check.send", kTimeoutMs, &err),
                err, "send");
  };
  auto recvIt = [&] {
    mustSucceed(api->recv(in.data(), n, peer, "check.recv", kTimeoutMs, &err),
                err, "recv");
  };
  if (rank % 2 == 0) {
    sendIt();
    recvIt();
  } else {
    recvIt();
    sendIt();
  }
  int bad = 0;
  for (int64_t j = 0; j < n; ++j)
    if (in[j] != gatherByte(peer, j) && bad++ < 5)
      fail("recv from rank %d [%lld] = %u, want %u", peer, (long long)j,
           in[j], gatherByte(peer, j));
  int32_t rc = api->send(out.data(), 1, rank, "check.self", kTimeoutMs, &err);
  if (rc != KILN_RT_INVALID_ARGUMENT || !std::strstr(err.message, "another"))
    fail("send to itself: code %d, message '%s'", rc, err.message);
}

/// Tensor-parallel groups of 2 (an even job): the all-reduce then sums
/// over ranks {2k, 2k + 1} only; the world all-gather still sees every rank.
void checkTpGroups() {
  if (size % 2 != 0 || size < 4)
    return;
  kiln_comm_error_t err{};
  mustSucceed(api->set_tp_group(2, &err), err, "set_tp_group(2)");
  float x = float(rank + 1);
  mustSucceed(api->all_reduce_sum(&x, 1, KILN_ELEM_F32, "check.group",
                                  kTimeoutMs, &err),
              err, "group all-reduce");
  const float want = float((rank / 2) * 4 + 3); // (2k + 1) + (2k + 2)
  if (x != want)
    fail("group all-reduce = %g, want %g", double(x), double(want));
  if (api->set_tp_group(3, &err) == 0)
    fail("set_tp_group(3) after set_tp_group(2) succeeded");
}

void checkErrors() {
  float x = 1;
  kiln_comm_error_t err{};
  int32_t rc = api->all_reduce_sum(&x, 1, 7, "check.bad", kTimeoutMs, &err);
  if (rc != KILN_RT_INVALID_ARGUMENT || !std::strstr(err.message, "type 7"))
    fail("all-reduce of element type 7: code %d, message '%s'", rc,
         err.message);
  rc = api->broadcast(&x, 4, size, "check.bad", kTimeoutMs, &err);
  if (rc != KILN_RT_INVALID_ARGUMENT || !std::strstr(err.message, "root"))
    fail("broadcast from rank %d: code %d, message '%s'", size, rc,
         err.message);
  rc = api->all_reduce_sum(&x, -1, KILN_ELEM_F32, "check.bad", kTimeoutMs,
                           &err);
  if (rc != KILN_RT_INVALID_ARGUMENT)
    fail("all-reduce of -1 elements: code %d", rc);
}

int runHang(int32_t hangRank, int64_t timeoutMs) {
  if (rank == hangRank) {
    usleep(useconds_t(timeoutMs * 10 * 1000));
    std::fprintf(stderr,
                 "comm-mpi: rank %d of %d: still alive after %lld ms: the "
                 "job was not aborted\n",
                 rank, size, (long long)(timeoutMs * 10));
    return 1;
  }
  std::vector<float> buf(2048, 1.f);
  kiln_comm_error_t err{};
  double t0 = nowMs();
  int32_t rc = api->all_reduce_sum(buf.data(), 2048, KILN_ELEM_F32,
                                   "layers.3.wo", timeoutMs, &err);
  double ms = nowMs() - t0;
  if (rc == 0)
    api->abort("comm-mpi check: the all-reduce completed without the hung "
               "rank",
               4);
  if (rc != KILN_RT_DEADLINE_EXCEEDED || ms < double(timeoutMs) * 0.99 ||
      !std::strstr(err.message, "timed out"))
    api->abort(("comm-mpi check: expected a timeout after the deadline, got "
                "code " + std::to_string(rc) + " after " +
                std::to_string(int(ms)) + " ms: " + err.message)
                   .c_str(),
               4);
  std::printf("comm-mpi: rank %d of %d: timed out as expected after %d ms "
              "(code %d)\n",
              rank, size, int(ms), rc);
  // The timed-out request is still pending: later collectives are refused.
  kiln_comm_error_t again{};
  float x = 1;
  if (api->all_reduce_sum(&x, 1, KILN_ELEM_F32, "after", timeoutMs, &again) !=
          KILN_RT_FAILED_PRECONDITION ||
      !std::strstr(again.message, "refused"))
    api->abort(("comm-mpi check: a collective after a timeout was not "
                "refused: " + std::string(again.message))
                   .c_str(),
               4);
  std::fflush(stdout);
  api->abort(err.message, 3);
  return 3; // not reached
}

} // namespace

int main(int argc, char **argv) {
  const char *lib = KILN_COMM_MPI_LIBRARY;
  int32_t hangRank = -1;
  int64_t hangTimeoutMs = 0;
  bool pipelineOnly = false; // --pipeline: send / recv and tp groups only
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--pipeline"))
      pipelineOnly = true;
    else if (!std::strcmp(argv[i], "--hang-rank") && i + 1 < argc)
      hangRank = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--timeout-ms") && i + 1 < argc)
      hangTimeoutMs = std::atoll(argv[++i]);
    else if (argv[i][0] != '-')
      lib = argv[i];
    else {
      std::fprintf(stderr,
                   "usage: kiln-comm-mpi-check [LIB] [--pipeline] "
                   "[--hang-rank K --timeout-ms T]\n");
      return 2;
    }
  }
  if (hangRank >= 0 && hangTimeoutMs <= 0) {
    std::fprintf(stderr, "kiln-comm-mpi-check: --hang-rank needs a positive "
                         "--timeout-ms\n");
    return 2;
  }

  void *handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    std::fprintf(stderr, "kiln-comm-mpi-check: cannot load %s: %s\n", lib,
                 dlerror());
    return 1;
  }
  auto getApi = reinterpret_cast<kiln_comm_get_api_fn>(
      dlsym(handle, "kiln_comm_get_api"));
  if (!getApi) {
    std::fprintf(stderr, "kiln-comm-mpi-check: %s exports no "
                         "kiln_comm_get_api\n", lib);
    return 1;
  }
  api = getApi();
  if (!api || api->interface_version != KILN_COMM_INTERFACE_VERSION ||
      api->struct_size != sizeof(kiln_comm_api_t) ||
      std::strcmp(api->name, "mpi") != 0) {
    std::fprintf(stderr, "kiln-comm-mpi-check: %s: bad table\n", lib);
    return 1;
  }
  kiln_comm_error_t err{};
  if (int32_t rc = api->init(&rank, &size, &err)) {
    std::fprintf(stderr, "kiln-comm-mpi-check: init failed (code %d): %s\n",
                 rc, err.message);
    return 1;
  }
  int32_t rank2 = -1, size2 = -1;
  if (api->init(&rank2, &size2, &err) != 0 || rank2 != rank || size2 != size)
    fail("second init: rank %d of %d", rank2, size2);
  if (const char *env = std::getenv("OMPI_COMM_WORLD_RANK"))
    if (std::atoi(env) != rank)
      fail("init says rank %d, OMPI_COMM_WORLD_RANK %s", rank, env);
  if (hangRank >= 0) {
    if (hangRank >= size) {
      std::fprintf(stderr, "kiln-comm-mpi-check: --hang-rank %d of %d\n",
                   hangRank, size);
      return 2;
    }
    return runHang(hangRank, hangTimeoutMs);
  }

  if (!pipelineOnly) {
    checkF32();
    check16(KILN_ELEM_F16);
    check16(KILN_ELEM_BF16);
    checkEmpty();
    checkBroadcast();
    checkAllGather();
    checkSequenceCollectives();
  }
  checkPointToPoint();
  if (!pipelineOnly)
    checkErrors();
  checkTpGroups();
  api->finalize();
  api->finalize(); // idempotent
  if (failures) {
    std::fprintf(stderr, "comm-mpi: rank %d of %d: %d failure(s)\n", rank,
                 size, failures);
    return 1;
  }
  std::printf("comm-mpi: rank %d of %d: ok\n", rank, size);
  return 0;
}
