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
// IN not a multiple of the block) exit with status 2 and a message.
//
//===----------------------------------------------------------------------===//

#include "kiln_rt/api.h"
#include "kiln_rt/block_formats.h"
#include "kiln_rt/kernel_abi.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

struct Matrix {
  std::vector<int8_t> q;     ///< blocks, int8 codes or packed nibbles
  std::vector<float> scales; ///< w8a16 / w4a16 (group 32), f32 weights
  std::vector<int8_t> zeros; ///< w4a16
};

int usage(const char *msg) {
  std::fprintf(stderr,
               "kiln-gemv-bench: %s\nusage: kiln-gemv-bench FORMAT IN OUT "
               "[THREADS] [MIB]\n  FORMAT: f32, w8a16, w4a16 or a GGML "
               "block format (q4_0 ... q6_k)\n",
               msg);
  return 2;
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

} // namespace

int main(int argc, char **argv) {
  if (argc < 4 || argc > 6)
    return usage("expected 3 to 5 arguments");
  const std::string name = argv[1];
  const int64_t in = std::atoll(argv[2]), out = std::atoll(argv[3]);
  const int threads = argc > 4 ? std::atoi(argv[4]) : 1;
  const int64_t mib = argc > 5 ? std::atoll(argv[5]) : 256;
  if (in <= 0 || out <= 0 || in % 256 != 0)
    return usage("IN must be a positive multiple of 256, OUT positive");
  if (threads < 1 || mib < 0)
    return usage("THREADS must be >= 1 and MIB >= 0");
  const int64_t format = kiln_block_format_from_name(name.c_str());
  enum { kBlocks, kF32, kW8, kW4 } kind = kBlocks;
  if (name == "f32")
    kind = kF32;
  else if (name == "w8a16")
    kind = kW8;
  else if (name == "w4a16")
    kind = kW4;
  else if (format == 0)
    return usage(("unknown format '" + name + "'").c_str());
  if (kiln_rt_status_t st = kiln_rt_set_threads(threads)) {
    kiln_rt_status_free(st);
    return usage("cannot set the thread count");
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
  const int64_t count =
      std::max<int64_t>(1, mib * (int64_t(1) << 20) / bytes);
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
  std::printf("%s %lld x %lld, %d thread%s, %lld matri%s (%.0f MiB): "
              "%.2f GB/s of weights, %.3f ms per GEMV\n",
              name.c_str(), (long long)out, (long long)in, threads,
              threads == 1 ? "" : "s", (long long)count,
              count == 1 ? "x" : "ces", double(bytes * count) / (1 << 20),
              double(bytes) * double(calls) / seconds / 1e9,
              seconds / double(calls) * 1e3);
  return 0;
}
