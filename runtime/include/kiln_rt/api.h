/*===- api.h - Kiln runtime public C API ---------------------------*- C -*-===*
 *
 * The only public header of the Kiln runtime (STYLE.md section 6). It loads an
 * artifact directory written by kiln-compile (docs/artifact.md), validates it,
 * and runs its prefill/decode entry points. The runtime knows nothing about the
 * model's architecture: it feeds token ids and reads float32 logits.
 *
 * Conventions (IREE-style):
 *  - Every fallible call returns a kiln_rt_status_t. NULL means success; a
 *    non-NULL status owns a code and a message and must be released with
 *    kiln_rt_status_free(). No C++ exception crosses this API.
 *  - Objects are opaque handles made by the _create and _open calls and destroyed by the
 *    matching _release (NULL is accepted and ignored). Results come back via
 *    out parameters, written only on success.
 *  - A session borrows its artifact: release sessions before the artifact.
 *  - Not thread-safe per object; kernels use OpenMP threads internally.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_API_H
#define KILN_RT_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*===--------------------------- status ----------------------------------===*/

typedef enum kiln_rt_status_code_e {
  KILN_RT_OK = 0,
  KILN_RT_INVALID_ARGUMENT = 1, /* bad caller input (token id, length) */
  KILN_RT_NOT_FOUND = 2,        /* missing file or symbol */
  KILN_RT_DATA_LOSS = 3,        /* size/checksum mismatch, malformed file */
  KILN_RT_UNIMPLEMENTED = 4,    /* unsupported version, ABI, target, dtype */
  KILN_RT_OUT_OF_RANGE = 5,     /* sequence does not fit the context */
  KILN_RT_RESOURCE_EXHAUSTED = 6, /* allocation failed */
  KILN_RT_INTERNAL = 7,
  KILN_RT_PERMISSION_DENIED = 8, /* signature required but missing, malformed
                                    or not by a trusted key */
  KILN_RT_FAILED_PRECONDITION = 9, /* wrong process setup: a partitioned
                                      artifact outside its mpirun job */
  KILN_RT_DEADLINE_EXCEEDED = 10,  /* a peer rank missed a collective's
                                      deadline (KILN_COMM_TIMEOUT_S) */
} kiln_rt_status_code_t;

typedef struct kiln_rt_status_s *kiln_rt_status_t; /* NULL == OK */

/// Code of `status` (KILN_RT_OK for NULL).
kiln_rt_status_code_t kiln_rt_status_code(kiln_rt_status_t status);
/// Message of `status`, NUL-terminated, valid until kiln_rt_status_free; ""
/// for NULL. Errors about a file name it as ARTIFACT/<file>.
const char *kiln_rt_status_message(kiln_rt_status_t status);
void kiln_rt_status_free(kiln_rt_status_t status);

/*===--------------------------- artifact --------------------------------===*/

typedef struct kiln_rt_artifact_s kiln_rt_artifact_t;

enum {
  /// Skip XXH3-64 checksums (sizes are still checked). For multi-GB weights.
  KILN_RT_OPEN_SKIP_CHECKSUMS = 1u << 0,
};

/// Opens and validates the artifact directory `dir` (manifest format, version,
/// ABI, target; every listed file's size and XXH3-64, weight offsets, KV-cache
/// size, arena size), mmaps weights.bin read-only, loads tokenizer.json and
/// dlopen()s model.so (RTLD_NOW | RTLD_LOCAL), then checks the sizes model.so
/// was planned for (plan_info.h) against the manifest and weights.bin.
/// Files inside the artifact must be regular files: symbolic links, FIFOs
/// and devices are refused without being followed or read. Every check that
/// does not need model.so's code is made before it is loaded: an artifact is
/// code (docs/security.md). `flags`: KILN_RT_OPEN_*.
kiln_rt_status_t kiln_rt_artifact_open(const char *dir, uint32_t flags,
                                       kiln_rt_artifact_t **out_artifact);

/// Options of kiln_rt_artifact_open_with_options; zero-initialize, then set.
typedef struct kiln_rt_open_options_t {
  uint32_t flags; /* KILN_RT_OPEN_* */
  /* NULL: no signature is required (as kiln_rt_artifact_open). Otherwise a
   * directory of trusted Ed25519 public keys (its "*.pub" files, written by
   * kiln-keygen) or one such file: the artifact must carry manifest.sig, a
   * signature of manifest.json by one of them, and every file's BLAKE2b-256
   * must match the manifest. Checked before model.so is loaded; a failure is
   * KILN_RT_PERMISSION_DENIED (signature) or KILN_RT_DATA_LOSS (contents).
   * Cannot be combined with KILN_RT_OPEN_SKIP_CHECKSUMS. */
  const char *trusted_keys;
} kiln_rt_open_options_t;

/// kiln_rt_artifact_open with options (NULL `options`: all zero).
kiln_rt_status_t
kiln_rt_artifact_open_with_options(const char *dir,
                                   const kiln_rt_open_options_t *options,
                                   kiln_rt_artifact_t **out_artifact);
void kiln_rt_artifact_release(kiln_rt_artifact_t *artifact);

/// Facts about an opened artifact the caller needs to drive generation.
typedef struct kiln_rt_model_info_t {
  int64_t vocab_size;         /* logits row length */
  int64_t max_seq_len;        /* context: positions [0, max_seq_len) */
  int64_t max_prefill_tokens; /* per prefill call (sessions split longer) */
  int32_t bos_id, eos_id;     /* from tokenizer.json */
  uint64_t weights_bytes;     /* size of weights.bin (bytes read per token) */
  uint64_t arena_bytes, kv_cache_bytes;
  const char *name;           /* model.name, valid while the artifact lives */
  const char *target;         /* manifest target: "cpu" or "cuda" */
  const char *device;         /* "cpu" or the CUDA device, e.g. "NVIDIA H200
                                 (132 SMs, 140 GiB, sm_90)" */
  const char *dtype;          /* recipe.dtype: "f32", "f16" or "bf16" */
  const char *quant;          /* recipe.quant: "none", "w8a16", "w4a16-rtn" */
  const char *kv_dtype;       /* kv_cache.dtype: a dtype, "int8", "fp8_e4m3" */
} kiln_rt_model_info_t;

void kiln_rt_artifact_info(const kiln_rt_artifact_t *artifact,
                           kiln_rt_model_info_t *out_info);

/// Memory bandwidth of the artifact's device in bytes/s: for "cuda" the best
/// of `reps` device-to-device cudaMemcpy of `buffer_bytes`, counting the
/// bytes read plus the bytes written. KILN_RT_UNIMPLEMENTED for "cpu" (measure
/// host memory directly, as kiln-bench does).
kiln_rt_status_t kiln_rt_artifact_device_bandwidth(
    const kiln_rt_artifact_t *artifact, uint64_t buffer_bytes, int32_t reps,
    double *out_bytes_per_second);

/// What chat needs from an artifact (manifest "chat", docs/artifact.md).
typedef struct kiln_rt_chat_info_t {
  /* chat_template.jinja's text (Jinja2, rendered by the caller, e.g. with
   * runtime/src/chat), checked against the manifest's hashes like every
   * file; NULL (and template_len 0) when the artifact has none. */
  const char *template_text;
  size_t template_len;
  /* Token ids that end an assistant turn: the model's EOT/EOM ids, then its
   * EOS (the EOS alone for artifacts without a "chat" entry). */
  const int32_t *end_of_turn_ids;
  size_t n_end_of_turn_ids;
  /* The BOS and EOS pieces as text, for templates' bos_token / eos_token
   * ("" when unknown). */
  const char *bos_token, *eos_token;
  /* The tokenizer's add_bos: a conversation starts with BOS unless the
   * rendered text already starts with bos_token (llama.cpp's rule). */
  int add_bos;
} kiln_rt_chat_info_t;

/// Fills `out_info`; pointers stay valid while the artifact lives.
void kiln_rt_artifact_chat_info(const kiln_rt_artifact_t *artifact,
                                kiln_rt_chat_info_t *out_info);

/*===--------------------------- tokenizer -------------------------------===*/

/// Encodes UTF-8 `text` (length `text_len` bytes) with the artifact's
/// tokenizer. With `add_bos`, adds the special tokens the tokenizer asks for
/// (its add_bos: BOS first; its add_eos: EOS last). Special (control) tokens
/// written in the text are recognised (byte-level BPE tokenizers, as Hugging
/// Face does by default). Writes up to `capacity` ids to `out_tokens` and
/// the full count to `*out_count`; if the count exceeds `capacity` returns
/// KILN_RT_OUT_OF_RANGE (call again with a larger buffer).
kiln_rt_status_t kiln_rt_tokenize(const kiln_rt_artifact_t *artifact,
                                  const char *text, size_t text_len,
                                  int add_bos, int32_t *out_tokens,
                                  size_t capacity, size_t *out_count);

/// kiln_rt_tokenize() flags.
enum {
  /// Add the BOS / EOS the tokenizer asks for (kiln_rt_tokenize's add_bos).
  KILN_RT_TOKENIZE_ADD_SPECIAL = 1,
  /// Treat control tokens written in the text as plain text (kiln-run
  /// --no-special; Hugging Face split_special_tokens=True). User-defined
  /// added tokens are still matched, as in Hugging Face and llama.cpp.
  KILN_RT_TOKENIZE_NO_SPECIAL = 2,
};

/// kiln_rt_tokenize() with `flags`, a bitwise or of KILN_RT_TOKENIZE_*.
kiln_rt_status_t kiln_rt_tokenize_ex(const kiln_rt_artifact_t *artifact,
                                     const char *text, size_t text_len,
                                     uint32_t flags, int32_t *out_tokens,
                                     size_t capacity, size_t *out_count);

/// The text of token `id` following token `prev_id` (the first space after
/// BOS is stripped; control tokens print nothing; "<0x0A>" gives a byte;
/// byte-level BPE pieces give their bytes, with no space stripped).
/// Returns a pointer valid until the next call on this artifact, and its byte
/// length in `*out_len` (may contain no NUL terminator semantics: use length).
kiln_rt_status_t kiln_rt_detokenize(kiln_rt_artifact_t *artifact,
                                    int32_t prev_id, int32_t id,
                                    const char **out_piece, size_t *out_len);

/*===--------------------------- session ---------------------------------===*/

typedef struct kiln_rt_session_s kiln_rt_session_t;

/// Creates a session: a zeroed KV cache (runtime.kv_cache.bytes), a 64-byte
/// aligned arena (runtime.arena_bytes) and a logits buffer float32[vocab].
/// For "cuda" artifacts these live on the device (which artifact_open found
/// and loaded the weights onto); steps return after the device finished.
/// After a failed step the session refuses further steps until reset.
kiln_rt_status_t kiln_rt_session_create(kiln_rt_artifact_t *artifact,
                                        kiln_rt_session_t **out_session);

/// Options of kiln_rt_session_create_with_options; zero-initialize, then set.
typedef struct kiln_rt_session_options_t {
  /* Positions the session may use, 1 <= context_length <= the artifact's
   * max_seq_len (kiln_rt_model_info_t); 0: max_seq_len. The KV-cache layout
   * is fixed by the compiled plan (rows of max_seq_len per layer), so the
   * cache is still reserved for max_seq_len positions, but on the cpu target
   * it is mapped on demand (MAP_NORESERVE): only the pages of the positions
   * used are ever committed. Beyond the limit prefill/decode return
   * KILN_RT_OUT_OF_RANGE. Larger than max_seq_len: KILN_RT_INVALID_ARGUMENT. */
  int64_t context_length;
} kiln_rt_session_options_t;

/// kiln_rt_session_create with options (NULL `options`: all zero).
kiln_rt_status_t kiln_rt_session_create_with_options(
    kiln_rt_artifact_t *artifact, const kiln_rt_session_options_t *options,
    kiln_rt_session_t **out_session);

/// The session's context length (positions [0, n)).
int64_t kiln_rt_session_context_length(const kiln_rt_session_t *session);
void kiln_rt_session_release(kiln_rt_session_t *session);

/// Forgets the sequence: position 0, KV cache zeroed.
void kiln_rt_session_reset(kiln_rt_session_t *session);

/// Number of tokens consumed so far (position of the next token).
int64_t kiln_rt_session_position(const kiln_rt_session_t *session);

/// Appends `n` >= 1 tokens at the current position with the prefill entry
/// point, in chunks of at most max_prefill_tokens. Errors (nothing run): an
/// id outside [0, vocab) (the message names it), or position + n beyond the
/// context (KILN_RT_OUT_OF_RANGE).
kiln_rt_status_t kiln_rt_session_prefill(kiln_rt_session_t *session,
                                         const int32_t *tokens, int64_t n);

/// Appends one token with the decode entry point (n = 1); same errors.
kiln_rt_status_t kiln_rt_session_decode(kiln_rt_session_t *session,
                                        int32_t token);

/// Speculative decoding's verify step (docs/speculative.md): appends `n` >= 1
/// tokens at the current position as prefill does, through the artifact's
/// verify entry point (kiln-compile --speculative), and writes the logits
/// of every one of them to `logits` (caller-owned float32[n, vocab_size];
/// row i is the next-token distribution after tokens[i]).
/// kiln_rt_session_logits then returns the last row. Errors: those of
/// prefill, an artifact without the entry point (KILN_RT_UNIMPLEMENTED,
/// naming the flag), a null buffer, a cuda artifact (not yet).
kiln_rt_status_t kiln_rt_session_verify(kiln_rt_session_t *session,
                                        const int32_t *tokens, int64_t n,
                                        float *logits);

/// Forgets the tokens after `position` (rejected draft tokens):
/// 0 <= position <= kiln_rt_session_position. The KV rows past it are
/// overwritten by the next step (attention never reads past the position);
/// the logits are cleared. Errors: a position outside that range.
kiln_rt_status_t kiln_rt_session_rollback(kiln_rt_session_t *session,
                                          int64_t position);

/// Logits of the last consumed token: float32[vocab_size], owned by the
/// session, overwritten by the next prefill/decode. NULL before any (and on a
/// device error while copying them back from a "cuda" session).
const float *kiln_rt_session_logits(const kiln_rt_session_t *session);

/// Dynamic sparse attention's counters over the process (kernel_abi.h
/// kiln_k_attention_sparse; docs/sparse-attention.md): out[0] causal
/// (query block, key block) pairs kept, out[1] pairs seen by the calls that
/// ran sparse, out[2] calls of the kernel (one per layer and prefill step),
/// out[3] of them run dense (below min_tokens, every block mandatory, or
/// 90% of the pairs kept; their pairs are not counted); all 0
/// without sparse artifacts. With reset != 0 they restart from 0 after
/// being read. Density = out[0] / out[1].
void kiln_rt_sparse_attention_stats(int64_t out[4], int reset);

/// The same per (layer, KV head): out[0] block pairs kept, out[1] seen (the
/// head's budget as a density; layers < 512, KV heads < 64, else zeros).
/// Reset with kiln_rt_sparse_attention_stats.
void kiln_rt_sparse_attention_head_stats(int64_t layer, int64_t kv_head,
                                         int64_t out[2]);

/// Sparse decode's counters (kernel_abi.h kiln_k_attention_sparse_decode,
/// Quest page selection): out[0] (KV head, page) pairs kept, out[1] seen
/// by the calls that ran sparse, out[2] calls (one per layer and decode
/// step), out[3] of them run dense; reset != 0 restarts them
/// after reading. Density = out[0] / out[1].
void kiln_rt_sparse_decode_stats(int64_t out[4], int reset);

/// The same per (layer, KV head): out[0] pages kept, out[1] seen (layers <
/// 512, KV heads < 64, else zeros). Reset with kiln_rt_sparse_decode_stats.
void kiln_rt_sparse_decode_head_stats(int64_t layer, int64_t kv_head,
                                      int64_t out[2]);

/// Sparse attention's accuracy price, measured while it runs (the audit;
/// docs/sparse-attention.md): with enable != 0 every later call of the
/// sparse prefill kernel also computes exact dense attention on the same
/// inputs and files, per layer (< 512), the attention mass each (row,
/// query head) captures with its kept keys (the sum of its exact softmax
/// probabilities over them; 1 for steps run dense) and the squared
/// Frobenius norms of the output error and of the dense output. Costs one
/// dense attention per call; off by default. Enabling also clears the
/// audit's sums.
void kiln_rt_sparse_attention_audit(int enable);

/// The audit of layer `layer`: out[0] (row, query head) pairs audited,
/// out[1] their mean captured mass, out[2] the smallest, out[3] the output
/// relative error ||O_sparse - O_dense||_F / ||O_dense||_F over the audited
/// calls; all 0 when nothing was audited for the layer.
void kiln_rt_sparse_attention_layer_audit(int64_t layer, double out[4]);

/*===--------------------------- calibration -----------------------------===*/

/// Receives the activations a calibration artifact observes (kiln.observe,
/// lowered to kernel_abi.h kiln_k_observe): `rows` tokens of `cols` float32
/// channels each, row-major, `x[r * cols + c]`, valid only during the call.
/// `tap` is the index of the tap in the compiler's kiln.observe_taps list
/// (kiln-calibrate maps it back to a name). Called on the thread running the
/// step, once per observed activation per prefill chunk / decode step, in
/// program order; must not call back into the session.
typedef void (*kiln_rt_observer_fn)(void *user, int64_t tap, const float *x,
                                    int64_t rows, int64_t cols);

/// Registers `fn` (with `user` passed back unchanged) as the observer of
/// `session`, replacing any earlier one; NULL `fn` removes it. Artifacts
/// without observers never call it; with no observer set, observers do
/// nothing. KILN_RT_UNIMPLEMENTED for "cuda" sessions (observers are
/// compiled for the cpu target only).
kiln_rt_status_t kiln_rt_session_set_observer(kiln_rt_session_t *session,
                                              kiln_rt_observer_fn fn,
                                              void *user);

/*===-------------------- tensor parallelism (mpirun) --------------------===*/
/*
 * An artifact compiled with kiln-compile --tp N (manifest "parallel") runs
 * as N processes started by mpirun, one rank each (docs/parallelism.md).
 * Every rank calls kiln_rt_parallel_init, then opens the artifact (mapping
 * only its own weights.rank<R>.bin). Rank 0 then uses the API as usual
 * (sessions; the serving engine does not drive a group yet): each session
 * step is broadcast to the other ranks, which run it on their shards inside
 * kiln_rt_parallel_follow. Every collective of a step has a deadline,
 * KILN_COMM_TIMEOUT_S seconds (default 30): a rank that died or hung ends
 * the whole job with a message naming the rank that waited.
 */

/// 1 when this process was started by mpirun (or another PMI/PMIx
/// launcher) as a rank of a job, even of one rank; else 0.
int kiln_rt_parallel_launched(void);

/// Joins the job (loads libkiln_comm_mpi.so from the runtime's directory
/// and initializes MPI) once per process; later calls return the same
/// values. *out_rank in [0, *out_size). Errors: KILN_RT_NOT_FOUND when the
/// runtime was built without Open MPI; KILN_RT_INVALID_ARGUMENT for a bad
/// KILN_COMM_TIMEOUT_S; KILN_RT_INTERNAL when MPI cannot start.
kiln_rt_status_t kiln_rt_parallel_init(int32_t *out_rank, int32_t *out_size);

/// Ranks other than 0: runs rank 0's session steps on this rank's shard of
/// `artifact` until rank 0 releases its artifact, then returns OK. Errors:
/// the artifact is not partitioned or this is rank 0
/// (KILN_RT_FAILED_PRECONDITION), a malformed command (KILN_RT_INTERNAL).
kiln_rt_status_t kiln_rt_parallel_follow(kiln_rt_artifact_t *artifact);

/// Leaves the job cleanly (MPI_Finalize) after every artifact is released;
/// every rank must call it at a normal exit. A rank that exits without it
/// (an error) makes mpirun end the whole job with a non-zero status. No-op
/// when kiln_rt_parallel_init was not called.
void kiln_rt_parallel_finalize(void);

/*===--------------------------- threads ---------------------------------===*/

/// Threads the CPU kernels use for the steps run by the calling thread (the
/// OpenMP thread count of that thread): n >= 1, or 0 for the default,
/// kiln_rt_default_threads(). Results are identical for every count (each
/// output element is computed by one thread in a fixed order).
/// KILN_RT_INVALID_ARGUMENT for n < 0 or n > 4096.
kiln_rt_status_t kiln_rt_set_threads(int n);

/// The thread count the next step of the calling thread will use.
int kiln_rt_threads(void);

/// Physical cores available to this process: the CPUs of its affinity mask
/// with SMT siblings counted once (Linux sysfs topology; every CPU of the
/// mask when the topology cannot be read). At least 1.
int kiln_rt_default_threads(void);

/// 1 when the CPU kernels' prefill GEMMs (linears, from 16 tokens; fewer
/// always take OpenBLAS) run on Intel AMX tiles, float32 split exactly into
/// three bf16 pieces with float32 sums (the CPU and OS offer AMX-BF16, and
/// KILN_AMX is not "0", "off", "no" or "false"); else 0: OpenBLAS sgemm.
/// Either way the results are float32 GEMMs up to rounding and summation
/// order.
int kiln_rt_cpu_amx(void);

/*===--------------------------- tracing ---------------------------------===*/

/// One event of a traced session: a kernel call of the emitted code (kind
/// is the op kind, loc its IR location) or a step (name "prefill" /
/// "decode", kind "step", loc ""). Times are kiln_rt_clock_ns()
/// nanoseconds; bytes and flops come from the compiler's cost model of the
/// call site (kernel_abi.h kiln_trace_site): bytes moved to or from memory,
/// counted once per buffer, and floating-point operations (a multiply-add
/// is 2); 0 for steps. The strings belong to the artifact and stay valid
/// while it is open.
typedef struct kiln_rt_trace_event_t {
  const char *name;  /* kernel function ("kiln_k_linear") or step name */
  const char *kind;  /* "linear", "attention", "rms_norm", ... or "step" */
  const char *loc;   /* "layers.3.wq", "file.mlir:12:5", or "" */
  uint64_t start_ns; /* kiln_rt_clock_ns() at the start */
  uint64_t dur_ns;   /* duration, nanoseconds */
  uint64_t bytes;    /* bytes moved (model), 0 for steps */
  uint64_t flops;    /* floating-point operations (model), 0 for steps */
  int64_t tokens;    /* tokens of the call (n) */
  int64_t pos;       /* position of its first token */
  uint32_t tid;      /* OS thread id of the thread that ran it */
} kiln_rt_trace_event_t;

/// Monotonic clock (CLOCK_MONOTONIC) in nanoseconds: the clock of trace
/// events, for callers adding spans of their own (sampling, detokenizing).
uint64_t kiln_rt_clock_ns(void);

/// OS thread id of the calling thread (the `tid` of its events).
uint32_t kiln_rt_thread_id(void);

/// Turns event recording on (`enabled` != 0: earlier events are dropped) or
/// off. While on, every prefill/decode step is recorded, and on the "cpu"
/// target every kernel call inside it (at most 4,194,304 events; later ones
/// are counted by kiln_rt_session_trace_dropped). "cuda" steps are recorded
/// without their kernels (launches are asynchronous). Error: null session.
kiln_rt_status_t kiln_rt_session_set_trace(kiln_rt_session_t *session,
                                           int enabled);

/// Number of events recorded (0 when tracing is off).
size_t kiln_rt_session_trace_size(const kiln_rt_session_t *session);

/// Event `index` < kiln_rt_session_trace_size() in recording order (a step
/// is recorded after the kernels it ran); returns 0 and leaves `out` alone
/// for an index out of range, 1 otherwise.
int kiln_rt_session_trace_event(const kiln_rt_session_t *session,
                                size_t index, kiln_rt_trace_event_t *out);

/// Events not recorded because the limit was reached.
uint64_t kiln_rt_session_trace_dropped(const kiln_rt_session_t *session);

/// Drops the recorded events (tracing stays on).
void kiln_rt_session_trace_clear(kiln_rt_session_t *session);

/*===--------------------------- sampler ---------------------------------===*/

typedef struct kiln_rt_sampler_s kiln_rt_sampler_t;

typedef struct kiln_rt_sampler_params_t {
  float temperature; /* 0 = greedy (argmax) */
  int32_t top_k;     /* 0 = off */
  float top_p;       /* nucleus; >= 1 or <= 0 = off */
  uint64_t seed;
} kiln_rt_sampler_params_t;

kiln_rt_status_t kiln_rt_sampler_create(const kiln_rt_sampler_params_t *params,
                                        int64_t vocab_size,
                                        kiln_rt_sampler_t **out_sampler);
void kiln_rt_sampler_release(kiln_rt_sampler_t *sampler);
/// Picks the next token from float32 `logits[vocab_size]` (not modified).
int32_t kiln_rt_sampler_sample(kiln_rt_sampler_t *sampler,
                               const float *logits);
/// Speculative sampling of one draft position (docs/speculative.md;
/// Leviathan et al. 2023, Chen et al. 2023) for a deterministic draft
/// token: with p the distribution kiln_rt_sampler_sample draws from
/// `logits` (temperature, top-k, top-p), keeps `draft` with probability
/// p(draft) (*accepted = 1) or else draws from p without the draft,
/// renormalised (*accepted = 0): the returned token is distributed as p.
/// Greedy samplers return the argmax, accepted iff it is the draft.
/// `logits` are not modified.
int32_t kiln_rt_sampler_verify(kiln_rt_sampler_t *sampler,
                               const float *logits, int32_t draft,
                               int32_t *accepted);

/// A draft model's token for speculative sampling with a draft model
/// (docs/speculative.md): writes q, the distribution
/// kiln_rt_sampler_sample draws from `logits` (temperature, top-k, top-p;
/// greedy: the argmax's point mass), to `q[vocab_size]` and returns a token
/// drawn from it. `logits` are not modified.
int32_t kiln_rt_sampler_draft(kiln_rt_sampler_t *sampler, const float *logits,
                              float *q);
/// Speculative sampling of one draft position whose token was drawn from q
/// (kiln_rt_sampler_draft on the draft model's logits; Leviathan et al.
/// 2023, Algorithm 1): with p the distribution kiln_rt_sampler_sample draws
/// from `logits`, keeps `draft` with probability min(1, p(draft) /
/// q(draft)) (*accepted = 1), or else draws from max(0, p - q) normalised
/// (*accepted = 0): the returned token is distributed as p. Greedy: the
/// argmax, accepted iff it is the draft. Inputs are not modified.
int32_t kiln_rt_sampler_verify_q(kiln_rt_sampler_t *sampler,
                                 const float *logits, const float *q,
                                 int32_t draft, int32_t *accepted);
/// Picks the next token from the session's logits with `sampler` where the
/// logits live: on the host for "cpu" (exactly kiln_rt_sampler_sample), on
/// the device for "cuda" (cuda_abi.h kiln_cuda_sample with a uniform coin
/// drawn from the sampler's seeded xorshift stream; only the id is copied
/// back). Errors: no logits yet, vocabulary size mismatch, device failure.
kiln_rt_status_t kiln_rt_session_sample(kiln_rt_session_t *session,
                                        kiln_rt_sampler_t *sampler,
                                        int32_t *out_token);


/*===--------------------------- serving engine --------------------------===*
 *
 * Many sequences at once (issue 12, docs/serving.md): continuous batching at
 * iteration level (Orca) over a paged KV cache (PagedAttention), with
 * prefix caching, chunked prefill and preemption by recompute. The engine
 * owns one thread that runs every model step (the artifact's batched entry
 * point `kiln_step`); the calls below are thread-safe and never run the
 * model on the caller's thread. Artifacts compiled with a step entry point
 * only (runtime.entry_points.step in manifest.json; kiln-compile writes it
 * unless the model's RoPE is scaled). "cpu" artifacts keep the pool in host
 * memory; "cuda" ones in device memory (cuda_abi.h kiln_cuda_paged_kv; the
 * logits of each step are copied back and sampled on the host).
 *===----------------------------------------------------------------------===*/

typedef struct kiln_rt_engine_s kiln_rt_engine_t;

/// Options of kiln_rt_engine_create; zero-initialize, then set.
typedef struct kiln_rt_engine_options_t {
  /* Bytes of the paged KV-cache pool (keys, values and 8-bit scales of all
   * layers). 0: kv_cache_fraction of physical memory. */
  uint64_t kv_cache_bytes;
  /* With kv_cache_bytes 0: this fraction (0, 1] of the memory the pool
   * lives in (physical memory; the device's for a "cuda" artifact); 0 means
   * the smaller of 0.1 of it and room for max_batch full-context
   * sequences. */
  double kv_cache_fraction;
  int32_t block_tokens;     /* positions per KV block; 0: 16 */
  int32_t max_batch;        /* sequences per step; 0: 16 */
  int32_t max_step_tokens;  /* token budget of a step (decode + prefill
                               chunks); 0: runtime.max_prefill_tokens */
  int32_t max_queue;        /* waiting requests before submit refuses with
                               KILN_RT_RESOURCE_EXHAUSTED; 0: 256 */
  int32_t context_length;   /* positions per sequence; 0: max_seq_len */
  int32_t threads;          /* threads of the engine's steps; 0: default */
  uint32_t flags;           /* KILN_RT_ENGINE_* */
  /* Pipeline stages (manifest parallel.pp > 1): each step runs as this many
   * micro-batches of its sequences, so that the stages overlap (GPipe);
   * 0: one per stage for steps that prefill, decode-only steps whole (a
   * micro-batch reads the stage's weights again); 1: every step whole. At
   * most 1024; ignored without stages. */
  int32_t pp_micro_batches;
} kiln_rt_engine_options_t;

enum {
  /// Turn prefix caching off (every prompt is prefilled in full).
  KILN_RT_ENGINE_NO_PREFIX_CACHE = 1u << 0,
  /// Batch-invariant steps: every linear sums each output in one order
  /// whatever the step's token count (one FMA chain of the decoded weight
  /// row against the token's row), so a request's logits, logprobs and
  /// greedy tokens are bit-identical alone and beside any other requests,
  /// under chunked prefill and preemption (He et al. 2025, "Defeating
  /// Nondeterminism in LLM Inference"; vLLM's VLLM_BATCH_INVARIANT). Costs
  /// speed (docs/serving.md); process-wide while such an engine lives.
  KILN_RT_ENGINE_BATCH_INVARIANT = 1u << 1,
};

/// Starts an engine on `artifact` (borrowed: release the engine first).
/// Errors: an artifact without a step entry point (KILN_RT_UNIMPLEMENTED,
/// naming the artifact), options out of range
/// (KILN_RT_INVALID_ARGUMENT, naming the field), a pool smaller than one
/// full-context sequence or that cannot be allocated
/// (KILN_RT_RESOURCE_EXHAUSTED, giving the bytes), a device failure while
/// allocating a cuda artifact's pool (the CUDA reason).
kiln_rt_status_t kiln_rt_engine_create(kiln_rt_artifact_t *artifact,
                                       const kiln_rt_engine_options_t *options,
                                       kiln_rt_engine_t **out_engine);
/// Cancels every request (each gets its KILN_RT_FINISH_CANCELLED callback),
/// stops the engine thread and frees the pool.
void kiln_rt_engine_release(kiln_rt_engine_t *engine);

/// Per-request generation parameters.
typedef struct kiln_rt_request_params_t {
  kiln_rt_sampler_params_t sampling; /* as kiln_rt_sampler_create */
  int32_t max_tokens;                /* tokens to generate, >= 1 */
  const int32_t *stop_ids;           /* ids that end the request (the id is
                                        reported, then FINISH_STOP) */
  int32_t n_stop_ids;
} kiln_rt_request_params_t;

typedef enum kiln_rt_finish_reason_e {
  KILN_RT_FINISH_NONE = 0,      /* not finished: a token */
  KILN_RT_FINISH_LENGTH = 1,    /* max_tokens reached */
  KILN_RT_FINISH_STOP = 2,      /* a stop id was generated */
  KILN_RT_FINISH_CANCELLED = 3, /* kiln_rt_engine_cancel or release */
  KILN_RT_FINISH_ERROR = 4,     /* the request's logits were NaN or
                                   infinite (kiln_rt_engine_request_error
                                   says where); other requests go on */
} kiln_rt_finish_reason_t;

/// Receives a request's output on the engine thread: once per generated
/// token (`token` >= 0, `finish` KILN_RT_FINISH_NONE), then exactly once
/// with `finish` set and `token` -1. `logprob` is the token's natural-log
/// probability under the model's raw distribution, log softmax(logits)
/// [token] before temperature, top-k and top-p (what OpenAI's and vLLM's
/// `logprobs` report); 0 with the final call. Must return quickly (it
/// delays every sequence's next step) and may call only
/// kiln_rt_engine_cancel.
typedef void (*kiln_rt_engine_callback_fn)(void *user, uint64_t request_id,
                                           int32_t token, float logprob,
                                           kiln_rt_finish_reason_t finish);

/// Queues a request for `prompt[0, n)` (ids checked against the vocabulary)
/// and returns its id (> 0) in `*out_id`; `callback` gets its tokens.
/// Errors, nothing queued: an id outside [0, vocab), n < 1, max_tokens < 1,
/// n + max_tokens beyond the context (KILN_RT_OUT_OF_RANGE), a request that
/// could never fit the pool, a full queue (KILN_RT_RESOURCE_EXHAUSTED), an
/// engine stopped by a failed step (KILN_RT_INTERNAL).
kiln_rt_status_t kiln_rt_engine_submit(kiln_rt_engine_t *engine,
                                       const int32_t *prompt, int64_t n,
                                       const kiln_rt_request_params_t *params,
                                       kiln_rt_engine_callback_fn callback,
                                       void *user, uint64_t *out_id);

/// Speculative decoding of one engine request (docs/speculative.md): each
/// decode step of the request may carry a draft of up to draft_max tokens,
/// verified in the same batched step (every draft row's logits), the
/// accepted ones kept (greedy: the argmax; sampling: the
/// speculative-sampling rule, same output distribution), the rest's KV
/// blocks released. The draft length adapts per request (0: a plain decode
/// row) to the measured acceptance and the engine's measured step cost.
typedef enum kiln_rt_speculative_mode_e {
  KILN_RT_SPECULATIVE_OFF = 0,
  KILN_RT_SPECULATIVE_NGRAM = 1,  /* prompt lookup: last 3 / 2 / 1 tokens */
  KILN_RT_SPECULATIVE_SUFFIX = 2, /* the suffix index (SuffixDecoding) */
} kiln_rt_speculative_mode_t;

typedef struct kiln_rt_speculative_params_t {
  int32_t mode;      /* kiln_rt_speculative_mode_t */
  int32_t draft_max; /* most draft tokens per step, 1 to 32 */
} kiln_rt_speculative_params_t;

/// kiln_rt_engine_submit with speculative decoding (`spec` NULL or mode OFF:
/// exactly kiln_rt_engine_submit). Errors, besides submit's: an unknown
/// mode or draft_max outside [1, 32] (KILN_RT_INVALID_ARGUMENT), an engine
/// whose steps cannot score draft rows: cuda artifacts and tensor / pipeline
/// parallel groups, not built yet (KILN_RT_UNIMPLEMENTED).
kiln_rt_status_t kiln_rt_engine_submit_speculative(
    kiln_rt_engine_t *engine, const int32_t *prompt, int64_t n,
    const kiln_rt_request_params_t *params,
    const kiln_rt_speculative_params_t *spec,
    kiln_rt_engine_callback_fn callback, void *user, uint64_t *out_id);

/// The engine's speculative-decoding counters since creation: draft tokens
/// verified, accepted, and the decode rows that carried a draft.
typedef struct kiln_rt_speculative_stats_t {
  int64_t draft_tokens;
  int64_t accepted_tokens;
  int64_t verify_rows;
} kiln_rt_speculative_stats_t;
void kiln_rt_engine_speculative_stats(kiln_rt_engine_t *engine,
                                      kiln_rt_speculative_stats_t *out);

/// Ends request `id` before the engine's next step: its KV blocks are freed
/// and its callback gets KILN_RT_FINISH_CANCELLED. Unknown or finished ids
/// are ignored. Callable from any thread, including inside a callback.
void kiln_rt_engine_cancel(kiln_rt_engine_t *engine, uint64_t id);

/// Why request `id` finished with KILN_RT_FINISH_ERROR: a
/// KILN_RT_DATA_LOSS status naming the request, the logit and the position
/// ("request 3: logit 17 is NaN after position 0: the weights are corrupted
/// or the activations overflowed"); NULL for a request that did not fail
/// (the last 256 failures are kept). The caller frees the status.
kiln_rt_status_t kiln_rt_engine_request_error(kiln_rt_engine_t *engine,
                                             uint64_t id);

/// Counters of an engine (cumulative unless stated).
typedef struct kiln_rt_engine_stats_t {
  int64_t num_running;            /* now: sequences holding KV blocks */
  int64_t num_waiting;            /* now: queued requests */
  int64_t kv_blocks_total;        /* blocks of the pool */
  int64_t kv_blocks_used;         /* now: blocks referenced by sequences */
  int64_t block_tokens;           /* positions per block */
  int64_t prefix_cache_queries;   /* prompt tokens looked up */
  int64_t prefix_cache_hits;      /* of those, found computed */
  int64_t num_preemptions;
  int64_t prompt_tokens;          /* prompt tokens prefilled (computed) */
  int64_t generation_tokens;      /* tokens generated */
  int64_t steps;                  /* model steps run */
  int64_t requests_finished;      /* any reason */
  int64_t context_length;         /* positions per sequence */
} kiln_rt_engine_stats_t;

void kiln_rt_engine_stats(kiln_rt_engine_t *engine,
                          kiln_rt_engine_stats_t *out_stats);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RT_API_H */
