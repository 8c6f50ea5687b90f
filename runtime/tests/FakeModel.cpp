//===- FakeModel.cpp - A stand-in model.so for runtime tests --------------===//
//
// Built like an emitted model: entry points with the kernel-ABI signature and
// kiln_k_* left undefined (bound to libkiln_runtime.so at dlopen time).
// weights[0] (float) holds the vocabulary size. Each call records its tokens
// in the KV cache (kv[pos + i] = token), shows them to the calibration
// observer (tap 7, one float channel) and predicts "last token + 1".
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/kernel_abi.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifdef KILN_RT_FAKE_MODEL_MARKER
/// The marker model (built from this file with KILN_RT_FAKE_MODEL_MARKER):
/// proof that it was loaded. Constructors run inside dlopen(), before any
/// check after it could refuse the artifact, so a test that finds no file
/// at $KILN_RT_TEST_MARKER knows the library was never dlopen()ed.
__attribute__((constructor)) static void markLoaded() {
  if (const char *path = std::getenv("KILN_RT_TEST_MARKER"))
    if (std::FILE *f = std::fopen(path, "w"))
      std::fclose(f);
}
#endif

extern "C" {

int64_t fake_prefill_calls = 0;
int64_t fake_decode_calls = 0;
int64_t fake_max_n = 0;

static void step(kiln_exec_ctx *ctx, int64_t n, int64_t pos) {
  if (n > fake_max_n)
    fake_max_n = n;
  int64_t vocab = int64_t(reinterpret_cast<const float *>(ctx->weights)[0]);
  for (int64_t i = 0; i < n; ++i)
    ctx->kv[pos + i] = float(ctx->tokens[i]);
  // Exercise a runtime kernel through the dynamic loader: a[2] = 1 + 2, a
  // one-row linear tile with weights (1, 1).
  float *a = reinterpret_cast<float *>(ctx->arena);
  a[0] = 1.0f;
  a[1] = 2.0f;
  static const float ones[2] = {1.0f, 1.0f};
  kiln_linear_weight w{};
  w.kind = KILN_WEIGHT_F32;
  w.data = ones;
  kiln_k_linear_tile(&w, a, 1, 2, 0, 1, a + 2, 1);
  // And the calibration observer: tokens as floats, [n, 1], tap 7.
  float *t = a + 16;
  for (int64_t i = 0; i < n; ++i)
    t[i] = float(ctx->tokens[i]);
  kiln_k_observe(ctx, t, n, 1, 7);
  std::memset(ctx->logits, 0, sizeof(float) * size_t(vocab));
  ctx->logits[(ctx->tokens[n - 1] + 1) % vocab] = a[2];
}

void kiln_prefill(kiln_exec_ctx *ctx, int64_t n, int64_t pos) {
  ++fake_prefill_calls;
  step(ctx, n, pos);
}

void kiln_decode(kiln_exec_ctx *ctx, int64_t n, int64_t pos) {
  ++fake_decode_calls;
  step(ctx, n, pos);
}

/// The sizes of ArtifactTest.cpp's FakeArtifact manifest (plan_info.h).
void kiln_plan_info(kiln_plan_info_t *out) {
  out->arena_bytes = 1024;
  out->max_prefill_tokens = 3;
  out->vocab_size = 16;
  out->kv_cache_bytes = 1 * 2 * 32 * 1 * 2 * 4;
  out->max_seq = 32;
  // weights.bin is 256 bytes; the fake model reads only its first float, but
  // claims prefill reads it all (the extent check compares these with the
  // size of weights.bin).
#ifndef KILN_RT_FAKE_MODEL_OLD_PLAN_INFO // built like a kernel ABI 3 model
  out->prefill_weights_extent = 256;
  out->decode_weights_extent = 4;
  out->step_max_tokens = 0; // no batched step entry point
  out->step_weights_extent = 0;
  out->tp_size = 1;
#endif
}

} // extern "C"
