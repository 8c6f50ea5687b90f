//===- GemvBench.cpp - Decode GEMV throughput per weight format -----------===//
//
// kiln-gemv-bench FORMAT IN OUT [THREADS] [MIB]
//
// Times the decode GEMV (one token: y[OUT] = W[OUT, IN] x[IN]) of the CPU
// kernels for one weight format and prints the weight bytes read per second
// (GB/s, 1e9 bytes), the number to hold against the memory bandwidth
// (kiln-bench prints it): FORMAT is a GGML block format (q4_0, q4_1, q5_0,
// q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k: kiln_k_linear_blocks), f32
// (kiln_k_linear), w8a16 or w4a16 (group 32: kiln_k_linear_w8a16 /
// kiln_k_linear_w4a16). Enough distinct matrices to fill MIB mebibytes
// (default 256, far beyond the last-level cache of most machines; 0 means
// one matrix, which then stays in cache) are cycled through, so that the
// weights come from DRAM. Weights are random bytes with finite scales; the
// output is not checked (KernelsBlocksTest and KernelsQuantTest do that).
// Runs about two seconds after one warm-up call. Errors (unknown format,
// arguments that are not whole integers in range, a matrix over 64 GiB or
// one that cannot be allocated) exit with status 2 and a message;
// --help and --version print to stdout.
//
//===----------------------------------------------------------------------===//

#include "cpu/WholeOpKernels.h"
#include "kiln_rt/api.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"

#include <algorithm>
#include <cerrno>
#include <new>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

enum Kind { kBlocks, kF32, kW8, kW4 };

struct Matrix {
  std::vector<int8_t> q;     ///< blocks, int8 codes or packed nibbles
  std::vector<float> scales; ///< w8a16 / w4a16 (group 32), f32 weights
  std::vector<int8_t> zeros; ///< w4a16
};

constexpr const char *kUsage =
    "usage: kiln-gemv-bench FORMAT IN OUT [THREADS] [MIB]\n"
    "  FORMAT: f32, w8a16, w4a16 or a GGML block format (q4_0, q4_1, q5_0,\n"
    "          q5_1, q8_0, q2_k, q3_k, q4_k, q5_k, q6_k)\n"
    "  IN, OUT: the matrix is OUT x IN (IN a multiple of 256, both at most\n"
    "          2^24); THREADS 1..4096 (default 1); MIB: mebibytes of distinct\n"
    "          matrices cycled through, 0..65536 (default 256; 0: one matrix)\n";

int usage(const std::string &msg) {
  std::fprintf(stderr, "kiln-gemv-bench: %s\n%s", msg.c_str(), kUsage);
  return 2;
}

/// `text` as a whole decimal integer in [lo, hi], or false.
bool parseInt(const char *text, int64_t lo, int64_t hi, int64_t &out) {
  errno = 0;
  char *end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi)
    return false;
  out = v;
  return true;
}

/// The byte offsets of a block's f16 fields (d, and dmin / m where the
/// format has one), which are set to a small finite value.
std::vector<int> halfFields(int64_t f) {
  switch (f) {
  case KILN_BLOCK_Q4_1: case KILN_BLOCK_Q5_1: case KILN_BLOCK_Q4_K:
  case KILN_BLOCK_Q5_K:
    return {0, 2};
  case KILN_BLOCK_Q2_K:
    return {80, 82};
  case KILN_BLOCK_Q3_K:
    return {108};
  case KILN_BLOCK_Q6_K:
    return {208};
  default:
    return {0};
  }
}

int run(const std::string &name, Kind kind, int64_t format, int64_t in,
        int64_t out, int64_t threads, int64_t bytes, int64_t count);

} // namespace

int main(int argc, char **argv) {
  if (argc == 2 && std::strcmp(argv[1], "--help") == 0) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--version") == 0) {
    std::printf("kiln-gemv-bench (Kiln kernel ABI %d)\n", KILN_ABI_VERSION);
    return 0;
  }
  if (argc < 4 || argc > 6)
    return usage("expected 3 to 5 arguments");
  const std::string name = argv[1];
  constexpr int64_t kMaxDim = int64_t(1) << 24;
  int64_t in = 0, out = 0, threads = 1, mib = 256;
  if (!parseInt(argv[2], 1, kMaxDim, in) || in % 256 != 0)
    return usage(std::string("IN must be a multiple of 256 in [256, 2^24], "
                             "got '") + argv[2] + "'");
  if (!parseInt(argv[3], 1, kMaxDim, out))
    return usage(std::string("OUT must be an integer in [1, 2^24], got '") +
                 argv[3] + "'");
  if (argc > 4 && !parseInt(argv[4], 1, 4096, threads))
    return usage(std::string("THREADS must be an integer in [1, 4096], got '") +
                 argv[4] + "'");
  if (argc > 5 && !parseInt(argv[5], 0, 65536, mib))
    return usage(std::string("MIB must be an integer in [0, 65536], got '") +
                 argv[5] + "'");
  const int64_t format = kiln_block_format_from_name(name.c_str());
  Kind kind = kBlocks;
  if (name == "f32")
    kind = kF32;
  else if (name == "w8a16")
    kind = kW8;
  else if (name == "w4a16")
    kind = kW4;
  else if (format == 0)
    return usage(("unknown format '" + name + "'").c_str());
  if (kiln_rt_status_t st = kiln_rt_set_threads(int(threads))) {
    std::string msg = "THREADS " + std::to_string(threads) + ": " +
                      kiln_rt_status_message(st);
    kiln_rt_status_free(st);
    return usage(msg);
  }

  const int64_t groups = in / 32;
  int64_t bytes = 0; // weight bytes per matrix
  switch (kind) {
  case kBlocks:
    bytes = out * (in / kiln_block_elems(format) * kiln_block_bytes(format));
    break;
  case kF32:
    bytes = out * in * 4;
    break;
  case kW8:
    bytes = out * (in + groups * 4);
    break;
  case kW4:
    bytes = out * (in / 2 + groups * 5);
    break;
  }
  if (bytes > (int64_t(64) << 30))
    return usage("a " + std::to_string(out) + " x " + std::to_string(in) +
                 " " + name + " matrix is " + std::to_string(bytes) +
                 " bytes, over 64 GiB");
  const int64_t count =
      std::max<int64_t>(1, mib * (int64_t(1) << 20) / bytes);
  // One matrix of 2^24 x 2^24 f32 is 2^50 bytes: the products above do not
  // overflow; what does not fit in memory is reported, not thrown.
  try {
    return run(name, kind, format, in, out, threads, bytes, count);
  } catch (const std::bad_alloc &) {
    std::fprintf(stderr,
                 "kiln-gemv-bench: cannot allocate %lld matri%s of %lld bytes "
                 "(%s %lld x %lld)\n",
                 (long long)count, count == 1 ? "x" : "ces", (long long)bytes,
                 name.c_str(), (long long)out, (long long)in);
    return 2;
  }
}

namespace {

int run(const std::string &name, Kind kind, int64_t format, int64_t in,
        int64_t out, int64_t threads, int64_t bytes, int64_t count) {
  const int64_t groups = in / 32;
  std::mt19937 rng(1);
  std::vector<Matrix> ms(static_cast<size_t>(count));
  for (Matrix &m : ms) {
    if (kind == kF32) {
      m.scales.resize(size_t(out * in));
      for (float &w : m.scales)
        w = float(int(rng() % 255) - 127) / 1024.0f;
      continue;
    }
    m.q.resize(size_t(kind == kBlocks ? bytes
                      : kind == kW8   ? out * in
                                      : out * in / 2));
    for (int8_t &b : m.q)
      b = int8_t(rng());
    if (kind == kBlocks) {
      const int64_t bb = kiln_block_bytes(format);
      for (int64_t b = 0; b < int64_t(m.q.size()) / bb; ++b)
        for (int off : halfFields(format)) {
          const uint16_t h = 0x2000; // 2^-7
          std::memcpy(m.q.data() + b * bb + off, &h, 2);
        }
    } else {
      m.scales.assign(size_t(out * groups), 1.0f / 128.0f);
      m.zeros.assign(size_t(out * groups), 8);
    }
  }
  std::vector<float> x(static_cast<size_t>(in)), y(static_cast<size_t>(out));
  for (float &v : x)
    v = float(int(rng() % 2001) - 1000) / 1000.0f;
  auto call = [&](const Matrix &m) {
    switch (kind) {
    case kBlocks:
      kiln_k_linear_blocks(x.data(), m.q.data(), y.data(), 1, in, out, format);
      return;
    case kF32:
      kiln_k_linear(x.data(), m.scales.data(), y.data(), 1, in, out);
      return;
    case kW8:
      kiln_k_linear_w8a16(x.data(), m.q.data(), m.scales.data(), y.data(), 1,
                          in, out, 32);
      return;
    case kW4:
      kiln_k_linear_w4a16(x.data(), m.q.data(), m.scales.data(),
                          m.zeros.data(), y.data(), 1, in, out, 32);
      return;
    }
  };
  call(ms[0]);
  int64_t calls = 0;
  double seconds = 0.0;
  const auto t0 = std::chrono::steady_clock::now();
  while (seconds < 2.0) {
    call(ms[size_t(calls % count)]);
    ++calls;
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            t0)
                  .count();
  }
  std::printf("%s %lld x %lld, %lld thread%s, %lld matri%s (%.0f MiB): "
              "%.2f GB/s of weights, %.3f ms per GEMV\n",
              name.c_str(), (long long)out, (long long)in, (long long)threads,
              threads == 1 ? "" : "s", (long long)count,
              count == 1 ? "x" : "ces", double(bytes * count) / (1 << 20),
              double(bytes) * double(calls) / seconds / 1e9,
              seconds / double(calls) * 1e3);
  return 0;
}

} // namespace
