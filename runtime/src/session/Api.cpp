//===- Api.cpp - The public C API (kiln_rt/api.h) -----------------*- C++ -*-===//
//
// Thin wrappers: handles are the C++ objects; every entry catches exceptions
// (allocation failures, JSON) so none crosses the C boundary.
//
//===----------------------------------------------------------------------===//
#include "kiln_rt/api.h"

#include "artifact/Artifact.h"
#include "comm/Comm.h"
#include "comm/ParallelExecutor.h"
#include "cpu/ThreadPool.h"
#include "serve/Engine.h"
#include "session/Session.h"
#include "tokenizer/Sampler.h"

#include <cstring>
#include <omp.h>
#include <exception>
#include <new>

using namespace kiln::rt;

struct kiln_rt_artifact_s {
  std::unique_ptr<Artifact> impl;
  int32_t eosFallback = 0; ///< end-of-turn id of artifacts without "chat"
};
struct kiln_rt_session_s {
  std::unique_ptr<Session> impl;
};
struct kiln_rt_sampler_s {
  Sampler impl;
  std::vector<float> scratch;
  /// Coins for device sampling: the same seed and xorshift stream the host
  /// Sampler draws from (one draw per non-greedy sample).
  XorShiftRng deviceRng;
};

/// Runs `body` (returning Status) and converts the outcome to a C status.
template <typename Fn> static kiln_rt_status_t guarded(Fn &&body) {
  try {
    return body().release();
  } catch (const std::bad_alloc &) {
    return Status(KILN_RT_RESOURCE_EXHAUSTED, "out of memory").release();
  } catch (const std::exception &e) {
    return internalError(std::string("internal error: ") + e.what()).release();
  } catch (...) {
    return internalError("internal error: unknown exception").release();
  }
}

extern "C" {

kiln_rt_status_t kiln_rt_artifact_open(const char *dir, uint32_t flags,
                                       kiln_rt_artifact_t **out_artifact) {
  kiln_rt_open_options_t options{};
  options.flags = flags;
  return kiln_rt_artifact_open_with_options(dir, &options, out_artifact);
}

kiln_rt_status_t
kiln_rt_artifact_open_with_options(const char *dir,
                                   const kiln_rt_open_options_t *options,
                                   kiln_rt_artifact_t **out_artifact) {
  return guarded([&]() -> Status {
    if (!dir || !out_artifact)
      return invalidArgument("kiln_rt_artifact_open: null argument");
    kiln_rt_open_options_t given{};
    if (options)
      given = *options;
    OpenOptions o;
    o.verifyChecksums = !(given.flags & KILN_RT_OPEN_SKIP_CHECKSUMS);
    if (given.trusted_keys) {
      if (!o.verifyChecksums)
        return invalidArgument(
            "kiln_rt_artifact_open: KILN_RT_OPEN_SKIP_CHECKSUMS cannot be "
            "combined with trusted_keys (a signature covers the files' "
            "contents only if their hashes are checked)");
      o.trustedKeys = given.trusted_keys;
      if (o.trustedKeys.empty())
        return invalidArgument(
            "kiln_rt_artifact_open: trusted_keys is an empty path");
    }
    std::unique_ptr<Artifact> a;
    KILN_RT_RETURN_IF_ERROR(Artifact::open(dir, o, a));
    int32_t eos = a->tokenizer().eosId();
    *out_artifact = new kiln_rt_artifact_s{std::move(a), eos};
    return Status::ok();
  });
}

void kiln_rt_artifact_release(kiln_rt_artifact_t *artifact) { delete artifact; }

void kiln_rt_artifact_info(const kiln_rt_artifact_t *artifact,
                           kiln_rt_model_info_t *out_info) {
  const Artifact &a = *artifact->impl;
  const Manifest &m = a.manifest();
  kiln_rt_model_info_t info;
  info.vocab_size = m.vocabSize;
  info.max_seq_len = a.contextLength();
  info.max_prefill_tokens = m.maxPrefillTokens;
  info.bos_id = a.tokenizer().bosId();
  info.eos_id = a.tokenizer().eosId();
  info.weights_bytes = a.weightsBytes();
  info.arena_bytes = m.arenaBytes;
  info.kv_cache_bytes = m.kvBytes;
  info.name = m.modelName.c_str();
  info.target = m.targetName.c_str();
  info.device = a.deviceName().c_str();
  info.dtype = m.dtype.c_str();
  info.quant = m.quant.c_str();
  info.kv_dtype = m.kvDtype.c_str();
  *out_info = info;
}

kiln_rt_status_t kiln_rt_artifact_device_bandwidth(
    const kiln_rt_artifact_t *artifact, uint64_t buffer_bytes, int32_t reps,
    double *out_bytes_per_second) {
  return guarded([&]() -> Status {
    if (!artifact || !out_bytes_per_second)
      return invalidArgument("kiln_rt_artifact_device_bandwidth: null argument");
    if (buffer_bytes == 0 || reps < 1)
      return invalidArgument("kiln_rt_artifact_device_bandwidth: buffer_bytes "
                             "and reps must be positive");
    double bw = 0;
    KILN_RT_RETURN_IF_ERROR(
        artifact->impl->deviceBandwidth(buffer_bytes, reps, bw));
    *out_bytes_per_second = bw;
    return Status::ok();
  });
}

kiln_rt_status_t kiln_rt_tokenize(const kiln_rt_artifact_t *artifact,
                                  const char *text, size_t text_len,
                                  int add_bos, int32_t *out_tokens,
                                  size_t capacity, size_t *out_count) {
  return kiln_rt_tokenize_ex(artifact, text, text_len,
                             add_bos ? KILN_RT_TOKENIZE_ADD_SPECIAL : 0,
                             out_tokens, capacity, out_count);
}

kiln_rt_status_t kiln_rt_tokenize_ex(const kiln_rt_artifact_t *artifact,
                                     const char *text, size_t text_len,
                                     uint32_t flags, int32_t *out_tokens,
                                     size_t capacity, size_t *out_count) {
  return guarded([&]() -> Status {
    if (!artifact || (!text && text_len) || !out_count)
      return invalidArgument("kiln_rt_tokenize: null argument");
    const kiln::rt::Tokenizer &tok = artifact->impl->tokenizer();
    bool addSpecial = (flags & KILN_RT_TOKENIZE_ADD_SPECIAL) != 0;
    kiln::rt::EncodeOptions options;
    options.addBos = addSpecial && tok.addBos();
    options.addEos = addSpecial && tok.addEos();
    options.parseSpecial = (flags & KILN_RT_TOKENIZE_NO_SPECIAL) == 0;
    std::vector<int32_t> ids =
        tok.encode(std::string_view(text ? text : "", text_len), options);
    *out_count = ids.size();
    if (ids.size() > capacity)
      return outOfRange("text encodes to " + std::to_string(ids.size()) +
                        " tokens, buffer holds " + std::to_string(capacity));
    if (!ids.empty())
      std::memcpy(out_tokens, ids.data(), ids.size() * sizeof(int32_t));
    return Status::ok();
  });
}

kiln_rt_status_t kiln_rt_detokenize(kiln_rt_artifact_t *artifact,
                                    int32_t prev_id, int32_t id,
                                    const char **out_piece, size_t *out_len) {
  return guarded([&]() -> Status {
    if (!artifact || !out_piece || !out_len)
      return invalidArgument("kiln_rt_detokenize: null argument");
    Artifact &a = *artifact->impl;
    if (!a.tokenizer().isValid(id))
      return invalidArgument("token id " + std::to_string(id) +
                             " is outside the tokenizer's vocabulary [0, " +
                             std::to_string(a.tokenizer().vocabSize()) + ")");
    a.pieceScratch = a.tokenizer().decodePiece(prev_id, id);
    *out_piece = a.pieceScratch.data();
    *out_len = a.pieceScratch.size();
    return Status::ok();
  });
}

kiln_rt_status_t kiln_rt_session_create(kiln_rt_artifact_t *artifact,
                                        kiln_rt_session_t **out_session) {
  return kiln_rt_session_create_with_options(artifact, nullptr, out_session);
}

kiln_rt_status_t kiln_rt_session_create_with_options(
    kiln_rt_artifact_t *artifact, const kiln_rt_session_options_t *options,
    kiln_rt_session_t **out_session) {
  return guarded([&]() -> Status {
    if (!artifact || !out_session)
      return invalidArgument("kiln_rt_session_create: null argument");
    kiln_rt_session_options_t given{};
    if (options)
      given = *options;
    std::unique_ptr<Session> s;
    KILN_RT_RETURN_IF_ERROR(
        Session::create(*artifact->impl, s, given.context_length));
    *out_session = new kiln_rt_session_s{std::move(s)};
    return Status::ok();
  });
}

int64_t kiln_rt_session_context_length(const kiln_rt_session_t *session) {
  return session->impl->contextLength();
}

void kiln_rt_artifact_chat_info(const kiln_rt_artifact_t *artifact,
                                kiln_rt_chat_info_t *out_info) {
  const Artifact &a = *artifact->impl;
  const Manifest &m = a.manifest();
  kiln_rt_chat_info_t info{};
  if (!a.chatTemplate().empty()) {
    info.template_text = a.chatTemplate().c_str();
    info.template_len = a.chatTemplate().size();
  }
  if (!m.endOfTurnIds.empty()) {
    info.end_of_turn_ids = m.endOfTurnIds.data();
    info.n_end_of_turn_ids = m.endOfTurnIds.size();
  } else {
    info.end_of_turn_ids = &artifact->eosFallback;
    info.n_end_of_turn_ids = 1;
  }
  info.bos_token = m.bosToken.c_str();
  info.eos_token = m.eosToken.c_str();
  info.add_bos = a.tokenizer().addBos() ? 1 : 0;
  *out_info = info;
}

void kiln_rt_session_release(kiln_rt_session_t *session) { delete session; }

void kiln_rt_session_reset(kiln_rt_session_t *session) { session->impl->reset(); }

int64_t kiln_rt_session_position(const kiln_rt_session_t *session) {
  return session->impl->position();
}

kiln_rt_status_t kiln_rt_session_prefill(kiln_rt_session_t *session,
                                         const int32_t *tokens, int64_t n) {
  return guarded([&]() -> Status {
    if (!session)
      return invalidArgument("kiln_rt_session_prefill: null session");
    return session->impl->prefill(tokens, n);
  });
}

kiln_rt_status_t kiln_rt_session_set_observer(kiln_rt_session_t *session,
                                              kiln_rt_observer_fn fn,
                                              void *user) {
  return guarded([&]() -> Status {
    if (!session)
      return invalidArgument("kiln_rt_session_set_observer: null session");
    return session->impl->executor().setObserver(fn, user);
  });
}

kiln_rt_status_t kiln_rt_session_decode(kiln_rt_session_t *session,
                                        int32_t token) {
  return guarded([&]() -> Status {
    if (!session)
      return invalidArgument("kiln_rt_session_decode: null session");
    return session->impl->decode(token);
  });
}

kiln_rt_status_t kiln_rt_session_verify(kiln_rt_session_t *session,
                                        const int32_t *tokens, int64_t n,
                                        float *logits) {
  return guarded([&]() -> Status {
    if (!session)
      return invalidArgument("kiln_rt_session_verify: null session");
    return session->impl->verify(tokens, n, logits);
  });
}

kiln_rt_status_t kiln_rt_session_rollback(kiln_rt_session_t *session,
                                          int64_t position) {
  return guarded([&]() -> Status {
    if (!session)
      return invalidArgument("kiln_rt_session_rollback: null session");
    return session->impl->rollback(position);
  });
}

const float *kiln_rt_session_logits(const kiln_rt_session_t *session) {
  return session->impl->logits();
}

kiln_rt_status_t kiln_rt_set_threads(int n) {
  return guarded([&]() -> Status {
    if (n < 0 || n > 4096)
      return invalidArgument("thread count " + std::to_string(n) +
                             " is outside [0, 4096] (0: the default, " +
                             std::to_string(kiln_rt_default_threads()) +
                             " physical cores)");
    const int threads = n == 0 ? kiln_rt_default_threads() : n;
    kiln::rt::cpu::setPoolThreads(threads);
    omp_set_num_threads(threads); // the tools' own OpenMP loops follow

    return Status::ok();
  });
}

int kiln_rt_parallel_launched(void) {
  return kiln::rt::launchedAsRank() ? 1 : 0;
}

kiln_rt_status_t kiln_rt_parallel_init(int32_t *out_rank, int32_t *out_size) {
  return guarded([&]() -> Status {
    if (!out_rank || !out_size)
      return invalidArgument("kiln_rt_parallel_init: null output");
    kiln::rt::Communicator *comm = nullptr;
    KILN_RT_RETURN_IF_ERROR(kiln::rt::joinGroup(comm));
    *out_rank = comm->rank();
    *out_size = comm->size();
    return Status::ok();
  });
}

kiln_rt_status_t kiln_rt_parallel_follow(kiln_rt_artifact_t *artifact) {
  return guarded([&]() -> Status {
    if (!artifact)
      return invalidArgument("kiln_rt_parallel_follow: null artifact");
    const Artifact &a = *artifact->impl;
    if (!a.group())
      return failedPrecondition(a.dir() + " is not partitioned (tp = 1): "
                                "there is no rank 0 to follow");
    if (a.group()->rank() == 0)
      return failedPrecondition("rank 0 drives its group; only the other "
                                "ranks follow");
    return kiln::rt::followRankZero(a, *a.group());
  });
}

void kiln_rt_parallel_finalize(void) {
  if (kiln::rt::Communicator *comm = kiln::rt::processGroup())
    comm->finalize();
}

uint64_t kiln_rt_clock_ns(void) { return kiln_trace_clock(); }

uint32_t kiln_rt_thread_id(void) { return traceThreadId(); }

kiln_rt_status_t kiln_rt_session_set_trace(kiln_rt_session_t *session,
                                           int enabled) {
  return guarded([&]() -> Status {
    if (!session)
      return invalidArgument("kiln_rt_session_set_trace: null session");
    session->impl->setTrace(enabled != 0);
    return Status::ok();
  });
}

size_t kiln_rt_session_trace_size(const kiln_rt_session_t *session) {
  const TraceRecorder *t = session ? session->impl->trace() : nullptr;
  return t ? t->events().size() : 0;
}

int kiln_rt_session_trace_event(const kiln_rt_session_t *session,
                                size_t index, kiln_rt_trace_event_t *out) {
  const TraceRecorder *t = session ? session->impl->trace() : nullptr;
  if (!t || !out || index >= t->events().size())
    return 0;
  const TraceEvent &e = t->events()[index];
  kiln_rt_trace_event_t r{};
  r.start_ns = e.startNs;
  r.dur_ns = e.durNs;
  r.tokens = e.tokens;
  r.pos = e.pos;
  r.tid = e.tid;
  if (e.site) {
    r.name = e.site->kernel ? e.site->kernel : "";
    r.kind = e.site->kind ? e.site->kind : "";
    r.loc = e.site->loc ? e.site->loc : "";
    traceCost(*e.site, e.tokens, e.pos, r.bytes, r.flops);
  } else {
    r.name = e.step ? e.step : "";
    r.kind = "step";
    r.loc = "";
  }
  *out = r;
  return 1;
}

uint64_t kiln_rt_session_trace_dropped(const kiln_rt_session_t *session) {
  const TraceRecorder *t = session ? session->impl->trace() : nullptr;
  return t ? t->dropped() : 0;
}

void kiln_rt_session_trace_clear(kiln_rt_session_t *session) {
  if (TraceRecorder *t = session ? session->impl->trace() : nullptr)
    t->clear();
}

kiln_rt_status_t kiln_rt_sampler_create(const kiln_rt_sampler_params_t *params,
                                        int64_t vocab_size,
                                        kiln_rt_sampler_t **out_sampler) {
  return guarded([&]() -> Status {
    if (!params || !out_sampler)
      return invalidArgument("kiln_rt_sampler_create: null argument");
    if (vocab_size < 1 || vocab_size > INT32_MAX)
      return invalidArgument("sampler vocabulary size " +
                             std::to_string(vocab_size) + " is out of range");
    if (!(params->temperature >= 0.0f))
      return invalidArgument("temperature must be >= 0, got " +
                             std::to_string(params->temperature));
    if (params->top_k < 0)
      return invalidArgument("top-k must be >= 0, got " +
                             std::to_string(params->top_k));
    // xorshift has a fixed point at 0.
    uint64_t seed = params->seed ? params->seed : 0x9E3779B97F4A7C15ull;
    *out_sampler = new kiln_rt_sampler_s{
        Sampler(int32_t(vocab_size), params->temperature, params->top_k,
                params->top_p, seed),
        std::vector<float>(size_t(vocab_size)), XorShiftRng(seed)};
    return Status::ok();
  });
}

void kiln_rt_sampler_release(kiln_rt_sampler_t *sampler) { delete sampler; }

int32_t kiln_rt_sampler_sample(kiln_rt_sampler_t *sampler,
                               const float *logits) {
  std::memcpy(sampler->scratch.data(), logits,
              sampler->scratch.size() * sizeof(float));
  return sampler->impl.sample(sampler->scratch.data());
}

int32_t kiln_rt_sampler_verify(kiln_rt_sampler_t *sampler,
                               const float *logits, int32_t draft,
                               int32_t *accepted) {
  std::memcpy(sampler->scratch.data(), logits,
              sampler->scratch.size() * sizeof(float));
  bool kept = false;
  const int32_t t = sampler->impl.verifyDraft(sampler->scratch.data(), draft,
                                              kept);
  if (accepted)
    *accepted = kept ? 1 : 0;
  return t;
}

int32_t kiln_rt_sampler_draft(kiln_rt_sampler_t *sampler, const float *logits,
                              float *q) {
  std::memcpy(q, logits, sampler->scratch.size() * sizeof(float));
  return sampler->impl.drawDraft(q);
}

int32_t kiln_rt_sampler_verify_q(kiln_rt_sampler_t *sampler,
                                 const float *logits, const float *q,
                                 int32_t draft, int32_t *accepted) {
  std::memcpy(sampler->scratch.data(), logits,
              sampler->scratch.size() * sizeof(float));
  bool kept = false;
  const int32_t t =
      sampler->impl.verifyDraftQ(sampler->scratch.data(), q, draft, kept);
  if (accepted)
    *accepted = kept ? 1 : 0;
  return t;
}

kiln_rt_status_t kiln_rt_session_sample(kiln_rt_session_t *session,
                                        kiln_rt_sampler_t *sampler,
                                        int32_t *out_token) {
  return guarded([&]() -> Status {
    if (!session || !sampler || !out_token)
      return invalidArgument("kiln_rt_session_sample: null argument");
    Session &s = *session->impl;
    int64_t vocab = s.artifact().manifest().vocabSize;
    if (sampler->impl.vocabSize() != vocab)
      return invalidArgument("sampler vocabulary size " +
                             std::to_string(sampler->impl.vocabSize()) +
                             " does not match the model's " +
                             std::to_string(vocab));
    if (!s.hasLogits())
      return invalidArgument("no logits to sample from (run prefill or decode "
                             "first)");
    Executor &e = s.executor();
    if (!e.samplesOnDevice()) {
      const float *logits = s.logits();
      if (!logits)
        return internalError("the session's logits are unavailable");
      *out_token = kiln_rt_sampler_sample(sampler, logits);
      return Status::ok();
    }
    // The host Sampler's conventions: top-k <= 0 or >= vocab is off, top-p
    // <= 0 or >= 1 is off; cuda_abi.h spells "off" 0 and 1.
    const Sampler &p = sampler->impl;
    float temperature = p.temperature();
    int32_t topK = p.topK() > 0 && p.topK() < vocab ? p.topK() : 0;
    // Like the host Sampler, top-k (when on) takes precedence over top-p.
    float topP = topK == 0 && p.topP() > 0.0f && p.topP() < 1.0f ? p.topP()
                                                                 : 1.0f;
    float coin = temperature > 0.0f ? sampler->deviceRng.nextF32() : 0.0f;
    int32_t token = 0;
    KILN_RT_RETURN_IF_ERROR(e.sample(temperature, topK, topP, coin, token));
    *out_token = token;
    return Status::ok();
  });
}

} // extern "C"

/*===--------------------------- serving engine --------------------------===*/

struct kiln_rt_engine_s {
  std::unique_ptr<kiln::rt::serve::Engine> impl;
};

kiln_rt_status_t kiln_rt_engine_create(kiln_rt_artifact_t *artifact,
                                       const kiln_rt_engine_options_t *options,
                                       kiln_rt_engine_t **out_engine) {
  return guarded([&]() -> Status {
    if (!artifact || !out_engine)
      return invalidArgument("kiln_rt_engine_create: null argument");
    kiln_rt_engine_options_t defaults{};
    std::unique_ptr<kiln::rt::serve::Engine> engine;
    KILN_RT_RETURN_IF_ERROR(kiln::rt::serve::Engine::create(
        *artifact->impl, options ? *options : defaults, engine));
    *out_engine = new kiln_rt_engine_s{std::move(engine)};
    return Status::ok();
  });
}

void kiln_rt_engine_release(kiln_rt_engine_t *engine) { delete engine; }

kiln_rt_status_t kiln_rt_engine_submit(kiln_rt_engine_t *engine,
                                       const int32_t *prompt, int64_t n,
                                       const kiln_rt_request_params_t *params,
                                       kiln_rt_engine_callback_fn callback,
                                       void *user, uint64_t *out_id) {
  return guarded([&]() -> Status {
    if (!engine || !params || !out_id)
      return invalidArgument("kiln_rt_engine_submit: null argument");
    uint64_t id = 0;
    KILN_RT_RETURN_IF_ERROR(
        engine->impl->submit(prompt, n, *params, callback, user, id));
    *out_id = id;
    return Status::ok();
  });
}

kiln_rt_status_t kiln_rt_engine_submit_speculative(
    kiln_rt_engine_t *engine, const int32_t *prompt, int64_t n,
    const kiln_rt_request_params_t *params,
    const kiln_rt_speculative_params_t *spec,
    kiln_rt_engine_callback_fn callback, void *user, uint64_t *out_id) {
  return guarded([&]() -> Status {
    if (!engine || !params || !out_id)
      return invalidArgument("kiln_rt_engine_submit_speculative: null argument");
    uint64_t id = 0;
    kiln_rt_speculative_params_t off{};
    KILN_RT_RETURN_IF_ERROR(engine->impl->submit(
        prompt, n, *params, callback, user, id, spec ? *spec : off));
    *out_id = id;
    return Status::ok();
  });
}

void kiln_rt_engine_speculative_stats(kiln_rt_engine_t *engine,
                                      kiln_rt_speculative_stats_t *out) {
  if (engine && out)
    *out = engine->impl->speculativeStats();
}

void kiln_rt_engine_cancel(kiln_rt_engine_t *engine, uint64_t id) {
  if (engine)
    engine->impl->cancel(id);
}

kiln_rt_status_t kiln_rt_engine_request_error(kiln_rt_engine_t *engine,
                                             uint64_t id) {
  return guarded([&]() -> Status {
    if (!engine)
      return invalidArgument("kiln_rt_engine_request_error: null engine");
    return engine->impl->requestError(id);
  });
}

void kiln_rt_engine_stats(kiln_rt_engine_t *engine,
                          kiln_rt_engine_stats_t *out_stats) {
  if (engine && out_stats)
    *out_stats = engine->impl->stats();
}
