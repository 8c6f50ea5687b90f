//===- Session.cpp - One generation stream over an artifact -------*- C++ -*-===//
#include "session/Session.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kiln::rt {

Session::~Session() {
  std::free(arena_);
  if (kv_)
    munmap(kv_, kvBytes_);
}

Status Session::create(const Artifact &artifact, std::unique_ptr<Session> &out) {
  const Manifest &m = artifact.manifest();
  std::unique_ptr<Session> s(new Session(artifact));
  uint64_t arenaBytes = (m.arenaBytes + 63) / 64 * 64;
  s->arena_ = static_cast<uint8_t *>(std::aligned_alloc(64, arenaBytes ? arenaBytes : 64));
  if (!s->arena_)
    return Status(KILN_RT_RESOURCE_EXHAUSTED,
                  "cannot allocate the activation arena of " +
                      std::to_string(m.arenaBytes) + " bytes");
  // Anonymous pages are zero and page (hence 64-byte) aligned.
  s->kvBytes_ = m.kvBytes;
  void *kv = mmap(nullptr, m.kvBytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (kv == MAP_FAILED)
    return Status(KILN_RT_RESOURCE_EXHAUSTED,
                  "cannot allocate the KV cache of " + std::to_string(m.kvBytes) +
                      " bytes: " + std::strerror(errno));
  s->kv_ = kv;
  s->logits_.assign(size_t(m.vocabSize), 0.0f);
  out = std::move(s);
  return Status::ok();
}

void Session::reset() {
  // Give the written pages back; the kernel maps zero pages on next touch.
  if (pos_ > 0 && madvise(kv_, kvBytes_, MADV_DONTNEED) != 0)
    std::memset(kv_, 0, kvBytes_);
  pos_ = 0;
  hasLogits_ = false;
}

Status Session::check(const int32_t *tokens, int64_t n) const {
  if (n < 1)
    return invalidArgument("no tokens to run (n = " + std::to_string(n) + ")");
  if (!tokens)
    return invalidArgument("token pointer is null");
  int64_t vocab = artifact_.manifest().vocabSize;
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      return invalidArgument("token id " + std::to_string(tokens[i]) +
                             " (index " + std::to_string(i) +
                             ") is outside the vocabulary [0, " +
                             std::to_string(vocab) + ")");
  int64_t ctx = artifact_.contextLength();
  if (pos_ + n > ctx)
    return outOfRange(std::to_string(n) + " tokens at position " +
                      std::to_string(pos_) + " exceed the model's context of " +
                      std::to_string(ctx) + " tokens");
  return Status::ok();
}

void Session::run(EntryPoint fn, const int32_t *tokens, int64_t n) {
  kiln_exec_ctx ctx;
  ctx.arena = arena_;
  ctx.weights = artifact_.weights();
  ctx.kv = static_cast<float *>(kv_);
  ctx.tokens = tokens;
  ctx.logits = logits_.data();
  ctx.runtime = this;
  fn(&ctx, n, pos_);
  pos_ += n;
  hasLogits_ = true;
}

Status Session::prefill(const int32_t *tokens, int64_t n) {
  KILN_RT_RETURN_IF_ERROR(check(tokens, n));
  int64_t chunk = artifact_.manifest().maxPrefillTokens;
  for (int64_t i = 0; i < n; i += chunk)
    run(artifact_.prefill(), tokens + i, std::min(chunk, n - i));
  return Status::ok();
}

Status Session::decode(int32_t token) {
  KILN_RT_RETURN_IF_ERROR(check(&token, 1));
  run(artifact_.decode(), &token, 1);
  return Status::ok();
}

} // namespace kiln::rt
