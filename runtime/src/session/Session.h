//===- Session.h - One generation stream over an artifact ---------*- C++ -*-===//
//
// A Session owns the mutable state of one sequence: the KV cache, the
// activation arena, the logits row and the current position. It drives the
// artifact's entry points and knows nothing about the model's architecture.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SESSION_SESSION_H
#define KILN_RUNTIME_SESSION_SESSION_H

#include "artifact/Artifact.h"

#include <memory>
#include <vector>

namespace kiln::rt {

class Session {
public:
  ~Session();
  Session(const Session &) = delete;
  Session &operator=(const Session &) = delete;

  /// Allocates a zeroed KV cache (runtime.kv_cache.bytes, anonymous mmap),
  /// a 64-byte aligned arena (runtime.arena_bytes) and float32[vocab] logits.
  static Status create(const Artifact &artifact, std::unique_ptr<Session> &out);

  /// Position 0 and a zeroed KV cache.
  void reset();

  /// Appends tokens[0, n) through the prefill entry point in chunks of at
  /// most runtime.max_prefill_tokens. Fails without running anything if an id
  /// is outside [0, vocab) or position + n exceeds the context.
  Status prefill(const int32_t *tokens, int64_t n);
  /// Appends one token through the decode entry point (n = 1).
  Status decode(int32_t token);

  int64_t position() const { return pos_; }
  /// float32[vocab] logits of the last consumed token; nullptr before any.
  const float *logits() const { return hasLogits_ ? logits_.data() : nullptr; }
  const Artifact &artifact() const { return artifact_; }

private:
  explicit Session(const Artifact &a) : artifact_(a) {}
  Status check(const int32_t *tokens, int64_t n) const;
  void run(EntryPoint fn, const int32_t *tokens, int64_t n);

  const Artifact &artifact_;
  uint8_t *arena_ = nullptr;
  void *kv_ = nullptr;
  uint64_t kvBytes_ = 0;
  std::vector<float> logits_;
  int64_t pos_ = 0;
  bool hasLogits_ = false;
};

} // namespace kiln::rt

#endif // KILN_RUNTIME_SESSION_SESSION_H
