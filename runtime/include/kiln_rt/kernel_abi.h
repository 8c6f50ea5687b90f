/*===- kernel_abi.h - Contract between emitted code and the runtime -*- C -*-===*
 *
 * The C ABI that code emitted by Kiln's CPU codegen calls into. Emitted code
 * (model.cpp, compiled into model.so inside an artifact) contains one entry
 * point per plan function:
 *
 *   extern "C" void kiln_prefill(kiln_exec_ctx *ctx, int64_t n, int64_t pos);
 *   extern "C" void kiln_decode(kiln_exec_ctx *ctx, int64_t n, int64_t pos);
 *   extern "C" void kiln_step(kiln_exec_ctx *ctx, int64_t n, int64_t pos);
 *
 * kiln_step (present when the plan has a batched step, plan_info.h
 * step_max_tokens > 0) runs the n token rows of ctx->batch's sequences over
 * the paged cache ctx->kv_pages (pos is 0 and unused) and writes the logits
 * of every sequence's last row (see "Batched steps" below).
 * `n` is the number of tokens in `ctx->tokens` (1 for decode, 1..max_tokens
 * of the plan for prefill) and `pos` the position of the first of them in the
 * sequence. Each entry point reads `ctx->tokens[0..n)`, appends their keys and
 * values to the KV cache at positions [pos, pos + n), and writes the logits
 * of the last token, float32[vocab], to `ctx->logits`.
 *
 * The kernels below are exported by libkiln_runtime.so; model.so leaves them
 * undefined and the dynamic loader binds them when the runtime dlopen()s it.
 * Kernels never fail: the plan was verified by the compiler and the runtime
 * validates sizes from manifest.json before calling an entry point.
 *
 * All tensors are dense, row-major, float32 unless stated. Bump
 * KILN_ABI_VERSION whenever a signature or the context layout changes; the
 * manifest records it and the runtime refuses a mismatch.
 *===----------------------------------------------------------------------===*/
#ifndef KILN_RT_KERNEL_ABI_H
#define KILN_RT_KERNEL_ABI_H

#include <stdint.h>

#include "kiln_rt/plan_info.h"
#include "kiln_rt/sequence_shard.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_ABI_VERSION 16

struct kiln_batch;
struct kiln_paged_kv;

/// Execution context handed to an entry point. Owned by the runtime.
typedef struct kiln_exec_ctx {
  uint8_t *arena;          ///< activation arena, manifest runtime.arena_bytes, 64-byte aligned
  const uint8_t *weights;  ///< base of weights.bin (mmap), tensors at manifest offsets
  float *kv;               ///< KV cache, manifest runtime.kv_cache.bytes, zeroed at start
  const int32_t *tokens;   ///< input token ids [n]
  float *logits;           ///< output: logits of the last input token [vocab]
  void *runtime;           ///< opaque, runtime-private (the session's observer)
  void *trace;             ///< opaque trace recorder; NULL when tracing is off
  /// kiln_step only (NULL otherwise): the step's sequences, and the paged
  /// KV cache, one descriptor per layer (block_table unused: each sequence
  /// uses its row of batch->block_tables). kiln_step writes one logits row
  /// per sequence, float32[batch->num_seqs, vocab], to `logits` (with
  /// batch->logit_count: float32[batch->num_logit_rows, vocab]).
  const struct kiln_batch *batch;
  const struct kiln_paged_kv *kv_pages;
  /// opaque, runtime-private: the tensor-parallel group this rank belongs
  /// to (kiln_k_all_reduce); NULL in a single-process run
  void *comm;
} kiln_exec_ctx;

/*===-- Tracing (kiln-run / kiln-bench / kiln-eval --trace) ---------------===*
 *
 * Every kernel call of an emitted entry point is bracketed by
 *
 *   uint64_t t = KILN_TRACE_BEGIN(ctx);
 *   kiln_k_...(...);
 *   KILN_TRACE_END(ctx, kiln_trace_sites_<entry>, i, t, n, pos);
 *
 * where kiln_trace_sites_<entry>[i] is a static description of call i of
 * that entry point, written by the compiler. With ctx->trace NULL (the
 * default) the cost is one load and branch per call; otherwise the runtime
 * records one event per call with its duration and the bytes and FLOPs the
 * site's cost model gives for this call's n tokens at position pos.
 *===----------------------------------------------------------------------===*/

/// Static description of one kernel call of an entry point (its call site).
/// Costs are the compiler's model of the call, counted once per buffer:
/// every weight and activation byte read or written, and the floating-point
/// operations (a multiply-add is 2).
///   bytes = bytes_fixed + bytes_per_token * n + kv_bytes_per_pos * kv_rows
///   flops = flops_fixed + flops_per_token * n + flops_per_pos * attended
/// where n is the call's token count when `per_token` is 1 (0 otherwise),
/// kv_rows = min(pos + n, window) cached positions read by attention and
/// attended = sum over the n new tokens i of min(pos + i + 1, window), the
/// (query token, key position) pairs; window 0 means unlimited.
typedef struct kiln_trace_site {
  const char *kernel;       ///< the called function, "kiln_k_attention" or a generated kernel
  const char *kind;         ///< op kind: "linear", "attention", "rms_norm", ...
  const char *loc;          ///< IR location of the op: "layers.3.wq", "file:line:col"
  int64_t bytes_fixed;      ///< bytes independent of n (weights, fixed-row buffers)
  int64_t bytes_per_token;  ///< bytes per token of n (activation rows, embedding rows)
  int64_t kv_bytes_per_pos; ///< attention: K, V (and scale) bytes per cached position
  int64_t flops_fixed;      ///< FLOPs independent of n (the classifier's last row)
  int64_t flops_per_token;  ///< FLOPs per token of n (2 * in * out for a linear)
  int64_t flops_per_pos;    ///< attention: FLOPs per (query, key) pair, 4 * heads * head_dim
  int64_t window;           ///< attention: sliding window, 0 for none
  int32_t per_token;        ///< 1: scales with n; 0: fixed rows
} kiln_trace_site;

/// Monotonic clock (CLOCK_MONOTONIC) in nanoseconds, the clock of every
/// trace event.
uint64_t kiln_trace_clock(void);

/// Records one kernel call of `site` that started at `start_ns` and ended
/// now, for n tokens at position pos, in the recorder ctx->trace (not NULL).
void kiln_trace_kernel(kiln_exec_ctx *ctx, const kiln_trace_site *site,
                       uint64_t start_ns, int64_t n, int64_t pos);

#define KILN_TRACE_BEGIN(ctx) ((ctx)->trace ? kiln_trace_clock() : (uint64_t)0)
#define KILN_TRACE_END(ctx, sites, i, start_ns, n, pos)                        \
  do {                                                                         \
    if ((ctx)->trace)                                                          \
      kiln_trace_kernel((ctx), &(sites)[(i)], (start_ns), (n), (pos));         \
  } while (0)

/// out[i, :] = table[tokens[i], :]; table [vocab, dim]; out [n, dim].
/// Token ids are validated by the runtime against vocab before the call.
void kiln_k_embedding(const int32_t *tokens, int64_t n, const float *table,
                      int64_t vocab, int64_t dim, float *out);

/// RMSNorm (Zhang & Sennrich 2019): y[i, j] = x[i, j] * w[j] /
/// sqrt(mean_j(x[i, :]^2) + eps). x, y [n, dim]; w [dim].
void kiln_k_rms_norm(const float *x, const float *w, float *y, int64_t n,
                     int64_t dim, float eps);

/// Calibration observer (kiln.observe): hands x [rows, cols] and the tap
/// index to the observer registered on the session running `ctx`
/// (api.h kiln_rt_session_set_observer); does nothing without one. The only
/// kernel that takes the execution context, which the emitted code passes
/// first.
void kiln_k_observe(kiln_exec_ctx *ctx, const float *x, int64_t rows,
                    int64_t cols, int64_t tap);

/// Tensor-parallel all-reduce (kiln.all_reduce; Megatron-LM's `g`
/// operator, Shoeybi et al. 2019, section 3): y[i] = sum over the ranks r of
/// the group of rank r's x[i], i < count, on every rank, in place when
/// x == y. elem: KILN_ELEM_F32, _F16 or _BF16 (16-bit values are summed in
/// float32 and rounded once). `what` names the reduction in messages (the
/// op's location, "layers.3.wo"). With ctx->comm NULL (one rank) y = x.
/// Takes the context first. Never returns a failure: a peer that does not
/// reach the reduction within the group's deadline (KILN_COMM_TIMEOUT_S)
/// ends the whole job with a message naming this rank (docs/parallelism.md).
void kiln_k_all_reduce(kiln_exec_ctx *ctx, const void *x, void *y,
                       int64_t count, int64_t elem, const char *what);

/// Sequence parallelism (kiln.reduce_scatter, kiln.all_slice,
/// kiln.all_gather_rows; Korthikanti et al. 2022): x and y are [rows, cols]
/// activations of element type `elem` (KILN_ELEM_*) split by rows over the
/// tensor-parallel group as kiln_rt/sequence_shard.h says (`rows` is every
/// row, n; `min_tokens` the split's threshold). Each takes the context
/// first and `what` (the op's location) last; with ctx->comm NULL (one
/// rank) each copies. Like kiln_k_all_reduce, a peer that misses the
/// group's deadline ends the job with a message naming this rank.
///   kiln_k_reduce_scatter: y [shard rows, cols] = this rank's rows of the
///     sum over the ranks of x [rows, cols] (16-bit values summed in
///     float32 and rounded once); below the threshold y [rows, cols] = the
///     all-reduce.
///   kiln_k_all_slice: y [shard rows, cols] = this rank's rows of x (local).
///   kiln_k_all_gather_rows: y [rows, cols] = every rank's x [its shard
///     rows, cols] in rank order; below the threshold y = x.
/// The rows of n this rank holds (kiln_rt/sequence_shard.h with the
/// rank's tensor-parallel group; n without one): plan.sequence_rows.
int64_t kiln_k_sequence_rows(kiln_exec_ctx *ctx, int64_t n,
                             int64_t min_tokens);
void kiln_k_reduce_scatter(kiln_exec_ctx *ctx, const void *x, void *y,
                           int64_t rows, int64_t cols, int64_t elem,
                           int64_t min_tokens, const char *what);
void kiln_k_all_slice(kiln_exec_ctx *ctx, const void *x, void *y,
                      int64_t rows, int64_t cols, int64_t elem,
                      int64_t min_tokens, const char *what);
void kiln_k_all_gather_rows(kiln_exec_ctx *ctx, const void *x, void *y,
                            int64_t rows, int64_t cols, int64_t elem,
                            int64_t min_tokens, const char *what);

/// The 8-bit all-gather (kiln.all_gather_rows with wire_quant): as
/// kiln_k_all_gather_rows for float32 rows (elem KILN_ELEM_F32 only), but
/// each rank quantizes its shard rows to int8 by `wire` and sends the codes
/// and their float32 scales; y = q * scale. Rules (round half away from
/// zero, codes clamped to [-127, 127], a zero scale gives zero codes):
///   KILN_WIRE_INT8_PER_TOKEN: s = max_i |x[r, i]| / 127 per row;
///   KILN_WIRE_INT8_PER_BLOCK: the same per 32 elements (cols % 32 == 0);
///   KILN_WIRE_INT8_PER_TENSOR: the static `scale` (> 0) for every row.
/// The rules are those of the int8-activation linears (kiln_k_linear_w8a8*,
/// kiln_k_linear_blocks_a8), so a reader re-quantizing y gets the same
/// codes. Bytes on the wire per row (kiln_wire_row_of in
/// kiln_rt/sequence_shard.h, which defines KILN_WIRE_INT8_*): cols + 4 (per
/// token), cols + cols / 8 (per block), cols (per tensor), each rounded up
/// to 4 — about 1/4 of the float32 rows. Below the threshold every rank
/// holds every row and y = x (no quantization). Takes the context first
/// and `what` last; a peer that misses the group's deadline ends the job.
void kiln_k_all_gather_rows_q8(kiln_exec_ctx *ctx, const void *x, void *y,
                               int64_t rows, int64_t cols, int64_t elem,
                               int64_t min_tokens, int64_t wire, float scale,
                               const char *what);

/// Communication fusion (kiln.reduce_scatter_add_rms_norm): s = this
/// rank's rows of the sum over the group of x [rows, cols]
/// (kiln_k_reduce_scatter: every row below min_tokens), then h = residual
/// + s and y = rms_norm(h, w, eps) (kiln_k_rms_norm's arithmetic) over the
/// shard's rows; residual, h, y [shard rows, cols], w [cols], all of `elem`.
/// s is written straight into h. Takes the context first and `what` last.
void kiln_k_reduce_scatter_add_rms_norm(kiln_exec_ctx *ctx, const void *x,
                                        const void *residual, const void *w,
                                        void *h, void *y, int64_t rows,
                                        int64_t cols, int64_t elem,
                                        int64_t min_tokens, float eps,
                                        const char *what);

/// Tensor-parallel all-gather of column blocks (kiln.all_gather; the
/// logits of a vocab-parallel classifier, Megatron-LM's parallel output
/// embedding): x [rows, cols] of each rank k lands in y [rows, ranks *
/// cols] at columns [k * cols, (k + 1) * cols), on every rank. elem:
/// KILN_ELEM_*. Takes the context first; with ctx->comm NULL y = x. Like
/// kiln_k_all_reduce, a peer that misses the deadline ends the job.
void kiln_k_all_gather(kiln_exec_ctx *ctx, const void *x, void *y,
                       int64_t rows, int64_t cols, int64_t elem,
                       const char *what);

/// Pipeline parallelism (kiln.send; GPipe, Huang et al. 2019): x [rows,
/// cols] of element type `elem` (KILN_ELEM_*) goes to pipeline stage
/// `dest_stage`, i.e. to the rank holding the same tensor-parallel shard of
/// that stage (rank dest_stage * tp + this rank's tp rank), where the
/// matching kiln_k_recv takes it. Takes the context first. `what` names the
/// transfer in messages (the op's location). Never returns a failure: a
/// peer that does not take it within the group's deadline
/// (KILN_COMM_TIMEOUT_S) ends the whole job with a message naming this
/// rank; with ctx->comm NULL (one process) the job ends at once, naming
/// the call (a stage program needs its pipeline).
void kiln_k_send(kiln_exec_ctx *ctx, const void *x, int64_t rows,
                 int64_t cols, int64_t elem, int64_t dest_stage,
                 const char *what);

/// The matching end of kiln_k_send (kiln.recv): y [rows, cols] of element
/// type `elem` from pipeline stage `source_stage`. Deadline and errors as
/// kiln_k_send.
void kiln_k_recv(kiln_exec_ctx *ctx, void *y, int64_t rows, int64_t cols,
                 int64_t elem, int64_t source_stage, const char *what);

/// Rotary position embedding (Su et al. 2021, RoFormer eq. 34), "adjacent
/// pair" layout of Meta's Llama / llama2.c / GGUF: within each head, the pair
/// (x[2i], x[2i+1]) for i < rot_dim/2 is rotated by angle
/// p * theta^(-2i/head_dim) where p = pos + row. Dimensions >= rot_dim pass
/// through. x, y [n, heads * head_dim].
void kiln_k_rope(const float *x, float *y, int64_t n, int64_t heads,
                 int64_t head_dim, int64_t rot_dim, int64_t pos, float theta);

/// kiln_k_rope with scaled inverse frequencies (kiln.rope with `scaling`;
/// kiln_rt/rope_scaling.h): pair i of row r rotates by
/// (pos + r) * kiln_rope_inv_freq(i, ...) with theta from kiln_rope_theta
/// for seq_len = pos + n. scaling is KILN_ROPE_LINEAR, KILN_ROPE_DYNAMIC or
/// KILN_ROPE_LLAMA3; factor > 0; the band parameters matter for LLAMA3 only,
/// original_max for DYNAMIC and LLAMA3.
void kiln_k_rope_scaled(const float *x, float *y, int64_t n, int64_t heads,
                        int64_t head_dim, int64_t rot_dim, int64_t pos,
                        float theta, int64_t scaling, float factor,
                        float low_freq_factor, float high_freq_factor,
                        int64_t original_max);

/// kiln_k_rope with per-pair frequency divisors (GGUF `rope_freqs.weight`,
/// llama.cpp's freq_factors): pair i rotates by
/// p * theta^(-2i/head_dim) / freq_factors[i]; freq_factors [rot_dim / 2]
/// float32 (also in 16-bit graphs), all positive.
void kiln_k_rope_factors(const float *x, float *y, int64_t n, int64_t heads,
                         int64_t head_dim, int64_t rot_dim, int64_t pos,
                         float theta, const float *freq_factors);

/// kiln_k_attention with a sliding window (Mistral; Beltagy et al. 2020,
/// Longformer's banded mask): token i attends to rows
/// j in [max(0, pos + i - window + 1), pos + i], i.e. to the `window` most
/// recent positions including its own. window >= 1.
void kiln_k_attention_window(const float *q, const float *k, const float *v,
                             float *k_cache, float *v_cache, float *out,
                             int64_t n, int64_t pos, int64_t heads,
                             int64_t kv_heads, int64_t head_dim,
                             int64_t max_seq, float scale, int64_t window);

/// Dynamic block-sparse prefill attention (kiln.attention with `sparse`;
/// docs/sparse-attention.md): kiln_k_attention's append and result, but
/// each query block attends only to the key blocks it keeps. Blocks of
/// `block` positions; per (kv head, query block qb) the attention mass on
/// each key block kb <= qb is estimated per head h of the GQA group as the
/// mean, over the block's rows r, of softmax_kb(scale * q_{r,h} . kbar_kb
/// + ln n_{r,kb}) (kbar_kb: the mean key of block kb; n_{r,kb}: its keys
/// at or before row r; keys pooled per block as in FlexPrefill, Lai et al.
/// 2025); blocks [0, sink) and the `local` blocks
/// ending at the diagonal are kept, then blocks by their largest estimated
/// mass over the group's heads (ties: the earlier) until every head's kept
/// mass reaches `gamma`, then more until
/// `min_budget` keys, then the least massive optional ones dropped down to
/// `max_budget` keys (0: no limit). Exact attention (online softmax of
/// kiln_k_attention's tiles) over the kept keys, causal in the diagonal
/// block. Runs kiln_k_attention itself (dense) when gamma >= 1, pos + n <
/// min_tokens, every block is mandatory, or 90% of the causal block pairs
/// are kept. `layer` (the op's) only files the kept pairs per (layer, KV
/// head) for api.h kiln_rt_sparse_attention_head_stats. `streaming`: a
/// bit mask of streaming KV heads (bit g for KV head g < 64; DuoAttention,
/// Xiao et al. 2024), which keep only the sink and local blocks and skip
/// the estimate; 0: every head selects by mass. `stride`: 0 for the pooled
/// estimate above; S in [1, block] for antidiagonal scoring (XAttention,
/// Xu et al. 2025) as a Horvitz-Thompson estimate of each row's softmax:
/// the keys of the mandatory (sink and local) blocks scored exactly
/// (weight 1), the other blocks' keys sampled, j <= p with (p + j) mod S =
/// S - 1 (weight S: each stands for S keys), the row's share of block kb =
/// sum_{j in kb} w_j e^(s_j) / sum_j w_j e^(s_j), about 1/S of the dense
/// QK^T work; gamma is then a fraction of the (estimated) true mass. Each
/// head of the group estimates its own masses; the group keeps one block
/// list, taking blocks by their largest mass over the heads until every
/// head's kept mass reaches gamma. _f16 / _bf16: 16-bit activations and
/// caches.
void kiln_k_attention_sparse(const float *q, const float *k, const float *v,
                             float *k_cache, float *v_cache, float *out,
                             int64_t n, int64_t pos, int64_t heads,
                             int64_t kv_heads, int64_t head_dim,
                             int64_t max_seq, float scale, float gamma,
                             int64_t block, int64_t sink, int64_t local,
                             int64_t min_budget, int64_t max_budget,
                             int64_t min_tokens, int64_t layer,
                             int64_t streaming, int64_t stride);

/// (Its counters: api.h kiln_rt_sparse_attention_stats.)

/// kiln_k_attention_sparse on a cache with key summaries (kiln.kv_cache
/// `summary = block`): then recomputes the element-wise minimum and maximum
/// keys k_min, k_max (f32 [ceil(max_seq / block), kv_heads * head_dim]
/// each) of the pages of `block` positions that rows [pos, pos + n) touch,
/// from the cache rows [page start, pos + n). f32 only.
void kiln_k_attention_sparse_summary(
    const float *q, const float *k, const float *v, float *k_cache,
    float *v_cache, float *k_min, float *k_max, float *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget,
    int64_t min_tokens, int64_t layer, int64_t streaming, int64_t stride);

/// Sparse decode (Quest, Tang et al. 2024): appends k, v at rows [pos, pos
/// + n) and updates the key summaries as kiln_k_attention_sparse_summary
/// does, then per KV head g ranks each page kb by the upper bound of its
/// scores, max over the group's heads h and the rows (position p) of scale
/// * sum_d max(q_d k_min[kb, d], q_d k_max[kb, d]) + ln n_kb (n_kb its keys
/// at or before p), estimates each head's mass on it as the mean over rows
/// of softmax_kb(scale * q . (k_min[kb] + k_max[kb]) / 2 + ln n_kb) (the
/// midpoint key, a pooled estimate), keeps pages as kiln_k_attention_sparse
/// keeps blocks but in bound order (sink and local pages, then until every
/// head's kept mass reaches gamma, budgets; streaming heads the mandatory
/// pages), and
/// runs exact attention over the kept pages' keys up to each row's
/// position with kiln_k_attention's decode arithmetic. Runs kiln_k_attention
/// itself when gamma >= 1, pos + n < min_tokens, every page is mandatory or
/// 90% of the pages are kept. `stride` is unused (page bounds replace the
/// prefill estimate). Counters: api.h kiln_rt_sparse_decode_stats. f32 only.
void kiln_k_attention_sparse_decode(
    const float *q, const float *k, const float *v, float *k_cache,
    float *v_cache, float *k_min, float *k_max, float *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget,
    int64_t min_tokens, int64_t layer, int64_t streaming, int64_t stride);

/// Causal grouped-query attention with a KV cache (Ainslie et al. 2023).
/// q [n, heads * head_dim]; k, v [n, kv_heads * head_dim] for the new tokens.
/// First stores k, v at rows [pos, pos + n) of k_cache, v_cache (each
/// [max_seq, kv_heads * head_dim]), then for each new token i (absolute
/// position pos + i) and head h with kv head h / (heads / kv_heads):
///   out[i, h] = softmax_j(q[i,h] . k_cache[j,kvh] * scale) v_cache[j,kvh],
///   j in [0, pos + i]. out [n, heads * head_dim].
void kiln_k_attention(const float *q, const float *k, const float *v,
                      float *k_cache, float *v_cache, float *out, int64_t n,
                      int64_t pos, int64_t heads, int64_t kv_heads,
                      int64_t head_dim, int64_t max_seq, float scale);

/*===-- Generated kernels (docs/fusion.md) --------------------------------===*
 *
 * Linears and elementwise ops are not runtime entry points: codegen
 * instantiates a C++ function for each of them, one per kiln.fused region
 * (several ops fused by kiln-fuse, or a single op outlined by
 * kiln-outline-kernels), specialised to the region's shapes, element types
 * and weight format. Those functions are built from the primitives below: a
 * linear tile over any weight format (kiln_linear_weight), a parallel loop
 * on the runtime's threads, per-thread scratch, 16-bit conversions and the
 * one-element arithmetic of SiLU, SwiGLU and RoPE. Linear layers compute
 * y[n, out] = x[n, in] * W^T in float32 for any activation type: 16-bit
 * inputs are widened exactly (kiln_k_widen) and each output element is
 * rounded once to the output type (kiln_float_to_f16 / _bf16).
 *===----------------------------------------------------------------------===*/

/// IEEE 754 binary16 bits (1 sign, 5 exponent, 10 mantissa bits).
typedef uint16_t kiln_f16_t;
/// bfloat16 bits: the upper half of a float32 (1 sign, 8 exponent, 7 mantissa).
typedef uint16_t kiln_bf16_t;

/// Weight kinds of kiln_linear_weight; the layouts are specified in the
/// sections below (W8A16, W4A16, GGML block formats).
enum {
  KILN_WEIGHT_F32 = 1,    ///< float32 [out, in]
  KILN_WEIGHT_BLOCKS = 2, ///< GGML blocks [out, in / elems * bytes], `format`
  KILN_WEIGHT_W8 = 3,     ///< int8 [out, in], scales (W8A16)
  KILN_WEIGHT_W4 = 4,     ///< packed nibbles [out, ceil(in / 2)], scales, zeros (W4A16)
  KILN_WEIGHT_F16 = 5,    ///< kiln_f16_t [out, in]
  KILN_WEIGHT_BF16 = 6    ///< kiln_bf16_t [out, in]
};

/// A linear layer's weight as the kernels read it, rows [out, ...]: `data`
/// and, for W8/W4, `scales` ([out] per channel or [out, G] groups) and
/// `zeros` ([out, G], W4), in the layouts of the sections below; `format` is
/// the GGML type id for KILN_WEIGHT_BLOCKS.
typedef struct kiln_linear_weight {
  int32_t kind;
  int32_t format;
  const void *data;
  const float *scales;
  const int8_t *zeros;
  int64_t group_size;
  int32_t act_quant; ///< KILN_ACT_* (KILN_WEIGHT_BLOCKS only)
} kiln_linear_weight;

/// Activation quantization of kiln_linear_weight.act_quant.
enum {
  KILN_ACT_NONE = 0,           ///< float32 activations
  KILN_ACT_INT8_PER_BLOCK = 1  ///< int8 per 32 elements (GGML block formats below)
};

/// c[t * ldc + (o - o0)] = sum_i x[t, i] * W[o, i] for t < n, o in [o0, o1):
/// output rows [o0, o1) of the linear for all n tokens (x float32 [n, in]),
/// on the calling thread. One token (decode): the memory-bound GEMV of the
/// weight's kind, weights widened in registers, float accumulation. More:
/// tiles of the weight dequantized to float32 (exact for F16/BF16/W8/W4 and
/// the block formats, scale * code rounded once for group-wise W8/W4)
/// multiplied on AMX tiles or with a single-threaded sgemm. Block weights
/// with act_quant KILN_ACT_INT8_PER_BLOCK: integer dots for n < 4, sgemm on
/// d_b * q_i from 4 tokens on (GGML block formats below). W8 per channel
/// applies scales[o] to the finished sums. c must not alias x.
void kiln_k_linear_tile(const kiln_linear_weight *w, const float *x, int64_t n,
                        int64_t in, int64_t o0, int64_t o1, float *c,
                        int64_t ldc);

/// Calls fn(env, begin, end) on contiguous chunks covering [0, count):
/// at most 32 chunks, sizes a multiple of `align` and a function of count
/// and align alone (never of the thread count), claimed by the runtime's
/// persistent threads (kiln_rt_set_threads); one chunk [0, count) on the
/// calling thread when `work` (multiply-adds) is too small to pay for
/// threads. Returns when every chunk is done.
void kiln_k_parallel_for(int64_t count, int64_t align, int64_t work,
                         void (*fn)(void *env, int64_t begin, int64_t end),
                         void *env);

/// Per-thread float scratch of at least `count` elements, slot 0..3; valid
/// until the same thread asks for the same slot again. Slot 0 is for the
/// calling thread outside kiln_k_parallel_for; kiln_k_linear_tile uses none.
float *kiln_k_scratch(int64_t slot, int64_t count);

/// Element types of activations (kiln_k_widen / _narrow take the 16-bit
/// ones).
enum { KILN_ELEM_F32 = 0, KILN_ELEM_F16 = 1, KILN_ELEM_BF16 = 2 };

/// y[i] = float(x[i]) for i < count, x kiln_f16_t (KILN_ELEM_F16) or
/// kiln_bf16_t (KILN_ELEM_BF16) bits; exact (SIMD where the CPU has it).
void kiln_k_widen(int32_t elem, const uint16_t *x, float *y, int64_t count);

/// y[i] = x[i] rounded to kiln_f16_t (KILN_ELEM_F16) or kiln_bf16_t
/// (KILN_ELEM_BF16) for i < count, bit-identical to kiln_float_to_f16 /
/// kiln_float_to_bf16 (SIMD where the CPU has it).
void kiln_k_narrow(int32_t elem, const float *x, uint16_t *y, int64_t count);

/// Scalar conversions of one element, bit-identical to the runtime's SIMD
/// ones: f16/bf16 -> float exact (a signalling f16 NaN comes back quiet, as
/// F16C does); float -> f16/bf16 round to nearest even, overflow to
/// infinity, NaN stays NaN (quiet; f16 keeps the upper payload bits as
/// vcvtps2ph does), f16 subnormals produced exactly.
static inline uint32_t kiln_float_bits(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}
static inline float kiln_bits_float(uint32_t u) {
  float f;
  __builtin_memcpy(&f, &u, sizeof(f));
  return f;
}
static inline float kiln_f16_to_float(kiln_f16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0x1f) /* inf, NaN (quieted) */
    return kiln_bits_float(sign | 0x7f800000u | (mant << 13) |
                           (mant ? 0x400000u : 0u));
  if (exp != 0) /* normal: rebias 15 -> 127 */
    return kiln_bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  float mag = (float)mant * 0x1p-24f; /* zero or subnormal, exact */
  return sign ? -mag : mag;
}
static inline kiln_f16_t kiln_float_to_f16(float f) {
  uint32_t x = kiln_float_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) /* NaN */
    return (kiln_f16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  if (ax >= 0x47800000u) /* >= 65536 or inf */
    return (kiln_f16_t)(sign | 0x7c00u);
  if (ax >= 0x38800000u) { /* f16 normal range (>= 2^-14), may round to inf */
    uint32_t r = ax + 0xfffu + ((ax >> 13) & 1u);
    return (kiln_f16_t)(sign | ((r - 0x38000000u) >> 13));
  }
  /* Zero or subnormal: adding 0.5 (ulp 2^-24, the f16 subnormal step)
   * rounds to nearest even in the FPU; 1024 steps give the smallest normal. */
  float sum = kiln_bits_float(ax) + 0.5f;
  return (kiln_f16_t)(sign | (kiln_float_bits(sum) - 0x3f000000u));
}
static inline float kiln_bf16_to_float(kiln_bf16_t h) {
  return kiln_bits_float((uint32_t)h << 16);
}
static inline kiln_bf16_t kiln_float_to_bf16(float f) {
  uint32_t x = kiln_float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one */
    return (kiln_bf16_t)((x >> 16) | 0x40u);
  return (kiln_bf16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/// SiLU (Elfwing et al. 2018) and SwiGLU (Shazeer 2020) of one element
/// (run.c order: silu(gate) then * up); the element arithmetic of every
/// generated elementwise op.
static inline float kiln_silu(float x) { return x * (1.0f / (1.0f + __builtin_expf(-x))); }
static inline float kiln_swiglu(float g, float u) {
  g *= 1.0f / (1.0f + __builtin_expf(-g));
  return g * u;
}

/// RoPE tables of a fused kernel's epilogue: cs[(r * P + i) * 2] = cos and
/// [... + 1] = sin of (pos + r) * theta^(-2i / head_dim) for r < n, i < P =
/// rot_dim / 2, computed exactly as kiln_k_rope does.
void kiln_k_rope_table(float *cs, int64_t n, int64_t pos, int64_t head_dim,
                       int64_t rot_dim, float theta);

/// One element of RoPE with kiln_k_rope's arithmetic: x at column `col` of a
/// row of heads of head_dim, `partner` the other element of its pair
/// (column col ^ 1), `cs` that row's table from kiln_k_rope_table.
static inline float kiln_rope_elem(float x, float partner, int64_t col,
                                   int64_t head_dim, int64_t rot_dim,
                                   const float *cs) {
  int64_t hc = col % head_dim;
  if (hc >= rot_dim / 2 * 2)
    return x;
  float c = cs[(hc / 2) * 2], s = cs[(hc / 2) * 2 + 1];
  return (hc & 1) == 0 ? x * c - partner * s : partner * s + x * c;
}

/// y[t, j] = x[t, offset + j] for t < n, j < width (x [n, in]): a column
/// range (kiln.slice_columns outside a fused region), any 4-byte element.
void kiln_k_slice_columns(const float *x, float *y, int64_t n, int64_t in,
                          int64_t offset, int64_t width);

/*===-- 16-bit element types ----------------------------------------------===*
 *
 * Artifacts with recipe.dtype "f16" / "bf16" keep weights, activations and
 * the KV cache (runtime.kv_cache.dtype; kiln_exec_ctx.kv then points at
 * elements of that type and emitted code casts it) in a 16-bit type and call
 * the kernels below instead of the float32 ones (linears and elementwise
 * ops are generated, above). Logits stay float32.
 *
 * Each kernel has exactly the semantics, argument list and aliasing rules of
 * its float32 counterpart above (float scalars eps / theta / scale stay
 * float). Computation is float32: inputs are widened exactly, products and
 * sums accumulate in float, and each output element is rounded once to the
 * output type with round-to-nearest-even (overflow gives infinity, NaN stays
 * NaN for both types, f16 subnormals are produced and read exactly). Results
 * therefore match the float32 kernel run on the widened inputs, with its
 * output rounded, up to float accumulation order. K/V rows appended to the
 * cache are the 16-bit inputs, stored unchanged.
 *===----------------------------------------------------------------------===*/

void kiln_k_embedding_f16(const int32_t *tokens, int64_t n,
                          const kiln_f16_t *table, int64_t vocab, int64_t dim,
                          kiln_f16_t *out);
void kiln_k_rms_norm_f16(const kiln_f16_t *x, const kiln_f16_t *w,
                         kiln_f16_t *y, int64_t n, int64_t dim, float eps);
void kiln_k_rope_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t n,
                     int64_t heads, int64_t head_dim, int64_t rot_dim,
                     int64_t pos, float theta);
void kiln_k_attention_f16(const kiln_f16_t *q, const kiln_f16_t *k,
                          const kiln_f16_t *v, kiln_f16_t *k_cache,
                          kiln_f16_t *v_cache, kiln_f16_t *out, int64_t n,
                          int64_t pos, int64_t heads, int64_t kv_heads,
                          int64_t head_dim, int64_t max_seq, float scale);
void kiln_k_rope_scaled_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t n,
                            int64_t heads, int64_t head_dim, int64_t rot_dim,
                            int64_t pos, float theta, int64_t scaling,
                            float factor, float low_freq_factor,
                            float high_freq_factor, int64_t original_max);
void kiln_k_rope_factors_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t n,
                             int64_t heads, int64_t head_dim, int64_t rot_dim,
                             int64_t pos, float theta,
                             const float *freq_factors);
void kiln_k_attention_sparse_f16(
    const kiln_f16_t *q, const kiln_f16_t *k, const kiln_f16_t *v,
    kiln_f16_t *k_cache, kiln_f16_t *v_cache, kiln_f16_t *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget, int64_t min_tokens,
    int64_t layer, int64_t streaming, int64_t stride);
void kiln_k_attention_sparse_bf16(
    const kiln_bf16_t *q, const kiln_bf16_t *k, const kiln_bf16_t *v,
    kiln_bf16_t *k_cache, kiln_bf16_t *v_cache, kiln_bf16_t *out, int64_t n,
    int64_t pos, int64_t heads, int64_t kv_heads, int64_t head_dim,
    int64_t max_seq, float scale, float gamma, int64_t block, int64_t sink,
    int64_t local, int64_t min_budget, int64_t max_budget, int64_t min_tokens,
    int64_t layer, int64_t streaming, int64_t stride);
void kiln_k_attention_window_f16(const kiln_f16_t *q, const kiln_f16_t *k,
                                 const kiln_f16_t *v, kiln_f16_t *k_cache,
                                 kiln_f16_t *v_cache, kiln_f16_t *out,
                                 int64_t n, int64_t pos, int64_t heads,
                                 int64_t kv_heads, int64_t head_dim,
                                 int64_t max_seq, float scale, int64_t window);
void kiln_k_slice_columns_f16(const kiln_f16_t *x, kiln_f16_t *y, int64_t n,
                              int64_t in, int64_t offset, int64_t width);

void kiln_k_embedding_bf16(const int32_t *tokens, int64_t n,
                           const kiln_bf16_t *table, int64_t vocab, int64_t dim,
                           kiln_bf16_t *out);
void kiln_k_rms_norm_bf16(const kiln_bf16_t *x, const kiln_bf16_t *w,
                          kiln_bf16_t *y, int64_t n, int64_t dim, float eps);
void kiln_k_rope_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t n,
                      int64_t heads, int64_t head_dim, int64_t rot_dim,
                      int64_t pos, float theta);
void kiln_k_attention_bf16(const kiln_bf16_t *q, const kiln_bf16_t *k,
                           const kiln_bf16_t *v, kiln_bf16_t *k_cache,
                           kiln_bf16_t *v_cache, kiln_bf16_t *out, int64_t n,
                           int64_t pos, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, int64_t max_seq, float scale);
void kiln_k_rope_scaled_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t n,
                            int64_t heads, int64_t head_dim, int64_t rot_dim,
                            int64_t pos, float theta, int64_t scaling,
                            float factor, float low_freq_factor,
                            float high_freq_factor, int64_t original_max);
void kiln_k_rope_factors_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t n,
                             int64_t heads, int64_t head_dim, int64_t rot_dim,
                             int64_t pos, float theta,
                             const float *freq_factors);
void kiln_k_attention_window_bf16(const kiln_bf16_t *q, const kiln_bf16_t *k,
                                 const kiln_bf16_t *v, kiln_bf16_t *k_cache,
                                 kiln_bf16_t *v_cache, kiln_bf16_t *out,
                                 int64_t n, int64_t pos, int64_t heads,
                                 int64_t kv_heads, int64_t head_dim,
                                 int64_t max_seq, float scale, int64_t window);
void kiln_k_slice_columns_bf16(const kiln_bf16_t *x, kiln_bf16_t *y, int64_t n,
                               int64_t in, int64_t offset, int64_t width);

/*===-- W8A16: int8 weights, per-output-channel or group-wise scales ------===*
 *
 * Weight-only quantized linear layers (kiln.quantized_linear with bits 8;
 * weight tensors with manifest dtype "i8"). A weight matrix W [out, in] is
 * stored symmetric (no zero points) as
 *   qweight int8 [out, in], row-major, values in [-127, 127], and
 *   scales  float32 [out]              for group_size == 0 (per output
 *           channel: W[o, i] = scales[o] * qweight[o, i]; scales typically
 *           max_i |W[o, i]| / 127, a zero row has scale 0), or
 *   scales  float32 [out, G], G = ceil(in / group_size), for group_size > 0
 *           (groups of group_size consecutive inputs, the last one shorter
 *           when group_size does not divide in; W[o, i] = scales[o, i /
 *           group_size] * qweight[o, i]). GGUF Q8_0 kept quantized is
 *           group_size 32 (one f16 scale per 32 weights in the file, widened
 *           to float32 here); kiln-quantize-weights writes scale = max|w_g| /
 *           127 per group.
 * (kiln_linear_weight kind KILN_WEIGHT_W8.) Activations x [n, in] and
 * y [n, out] are float32, f16 or bf16. Each output is
 *   y[r, o] = scales[o] * sum_i float(x[r, i]) * float(qweight[o, i])
 *             (per channel), or
 *   y[r, o] = sum_g scales[o, g] * sum_{i in g} float(x[r, i]) *
 *             float(qweight[o, i])   (group-wise; prefill may instead sum
 *             float(x) * float(scales[o, g] * qweight[o, i])),
 * the sums accumulated in float (int8 values and 16-bit inputs widen
 * exactly), then for 16-bit outputs rounded once to nearest even. This equals
 * the float32 linear on the dequantized weights up to float rounding and
 * accumulation order. y must not alias x. Any in, out; no alignment required.
 * The SIMD loops are Google Highway code dispatched at run time (AVX-512,
 * AVX2, SSE4 or scalar), so results differ between CPUs only by float
 * summation order.
 *===----------------------------------------------------------------------===*/

/*===-- W8A8: int8 activations x int8 weights (SmoothQuant) ---------------===*
 *
 * kiln.quantized_linear with act_quant (SmoothQuant, Xiao et al. 2023,
 * "SmoothQuant: Accurate and Efficient Post-Training Quantization for Large
 * Language Models", eq. 1-4: the smoothing factors are folded into the
 * weights and the preceding RMSNorm by the compiler, so the kernel sees a
 * plain W8A8 linear layer). Weights as for W8A16 per channel: qweight int8
 * [out, in] in [-127, 127], scales float32 [out]. Activations x [n, in] and
 * y [n, out] have the element type of the suffix. For each row r of x
 * (widened to float32):
 *   sx[r]     = max_i |x[r, i]| / 127     when act_scale == 0 (dynamic
 *               per-token scales; a zero row has sx 0 and gives y[r, :] = 0)
 *             = act_scale                 when act_scale > 0 (static
 *               per-tensor scale from calibration; values beyond
 *               127 * act_scale clip),
 *   xq[r, i]  = clamp(roundf(x[r, i] / sx[r]), -127, 127)   (float32
 *               division, round half away from zero),
 *   y[r, o]   = sx[r] * scales[o] * (float) sum_i (int32) xq[r, i] * q[o, i]
 * (evaluated left to right in float32; the int32 sum is exact for
 * in < 133,000), rounded once to nearest even for 16-bit outputs. The int8
 * products use Highway's ReorderWidenMulAccumulate (vpmaddwd on x86), so y
 * is bit-identical on every SIMD target. Non-finite x give unspecified y.
 * y must not alias x. Any n, in, out; no alignment required.
 *===----------------------------------------------------------------------===*/

void kiln_k_linear_w8a8(const float *x, const int8_t *qweight,
                        const float *scales, float *y, int64_t n, int64_t in,
                        int64_t out, float act_scale);
void kiln_k_linear_w8a8_f16(const kiln_f16_t *x, const int8_t *qweight,
                            const float *scales, kiln_f16_t *y, int64_t n,
                            int64_t in, int64_t out, float act_scale);
void kiln_k_linear_w8a8_bf16(const kiln_bf16_t *x, const int8_t *qweight,
                             const float *scales, kiln_bf16_t *y, int64_t n,
                             int64_t in, int64_t out, float act_scale);

/*===-- W4A16: packed 4-bit weights, group-wise asymmetric scales ---------===*
 *
 * Weight-only 4-bit linear layers (round-to-nearest, the GPTQ / AWQ storage
 * family). A weight matrix W [out, in] is stored with group size gs (> 0 and
 * even, guaranteed by the compiler), G = ceil(in / gs) groups per row (the
 * last one shorter when gs does not divide in, e.g. in 172, gs 128: 128 + 44):
 *   qweight int8 bytes [out, ceil(in / 2)], row-major, two unsigned 4-bit
 *           values per byte: byte j of row o holds q[o, 2j] in its low nibble
 *           and q[o, 2j + 1] in its high nibble (for odd in, the high nibble
 *           of a row's last byte is padding, written 0 and never read);
 *   scales  float32 [out, G];
 *   zeros   int8 bytes [out, G], values 0..15 (one byte each, not packed);
 *   W[o, i] = scales[o, g] * (q[o, i] - zeros[o, g]),  g = i / gs.
 * (kiln_linear_weight kind KILN_WEIGHT_W4.) Activations as for W8A16, x [n, in],
 * y [n, out]. Each output is
 *   y[r, o] = sum_g scales[o, g] * sum_{i in g} float(x[r, i]) *
 *                                                float(q[o, i] - zeros[o, g])
 * (q - zero is an exact small integer) accumulated in float, or the same sum
 * over float(x) * float(scales[o, g] * (q - zero)) (prefill), then for 16-bit
 * outputs rounded once to nearest even. This equals the float32 linear on the
 * dequantized float32 weights up to float rounding and accumulation order; a
 * row whose scales are all 0 gives exactly 0. y must not alias x. Any in, out;
 * no alignment required.
 *===----------------------------------------------------------------------===*/

/*===-- GGML block formats: weights kept as a GGUF file stores them -------===*
 *
 * `format` is a GGML type id of kiln_rt/block_formats.h (Q4_0 2, Q4_1 3,
 * Q5_0 6, Q5_1 7, Q8_0 8, Q2_K 10, Q3_K 11, Q4_K 12, Q5_K 13, Q6_K 14); a
 * weight [rows, cols] is int8 bytes [rows, cols / E * B] (E elements of B
 * bytes per block), each row cols / E whole blocks, decoded with
 * kiln_block_decode. cols is a multiple of E (the compiler checks).
 * Activations are float32.
 *
 * kiln_k_embedding_blocks: out[i, :] = decode(table row tokens[i]);
 * table [vocab, dim] in `format`, out [n, dim]. Exact.
 *
 * A linear (kiln_linear_weight kind KILN_WEIGHT_BLOCKS):
 * y[n, out] = x[n, in] * W^T with W [out, in] in
 * `format`. One token (decode): each row's blocks are decoded into registers
 * and dotted with x, float accumulation per block then per row. More tokens
 * (prefill): tiles of W decoded to float and multiplied with sgemm. Equals
 * the float32 linear on the decoded weights up to accumulation order.
 * y must not alias x.
 *
 * The same linear with int8 activations (act_quant KILN_ACT_INT8_PER_BLOCK:
 * the explicit recipe act_quant = "int8_per_block", kiln-compile
 * --act-quant=int8): each row of x is quantized per 32 elements as
 * llama.cpp's Q8_0 activations,
 *   d_b = max_{i in b} |x_i| / 127 (float32),
 *   q_i = clamp(roundf(x_i / d_b), -127, 127)   (0 where d_b = 0),
 * and y[t, o] = sum_b d_b * sum_{i in b} W[o, i] * q_i, the inner sums of
 * codes exact in int32 per 16/32-element group of the weight's format
 * (AVX-512 VNNI or AVX2 integer dot products), the scales applied in
 * float32. From 4 tokens on (prefill) the same formula is computed in
 * float32 instead: x replaced by d_b * q_i and multiplied with decoded
 * weight tiles, exact up to float summation order and far faster than one
 * integer GEMV per token. in a multiple of 32 (of 256 for the K-quants).
 *===----------------------------------------------------------------------===*/

void kiln_k_embedding_blocks(const int32_t *tokens, int64_t n,
                             const int8_t *table, int64_t vocab, int64_t dim,
                             float *out, int64_t format);

/*===-- INT8 KV cache: per-token, per-kv-head symmetric scales -----------===*
 *
 * Attention over a KV cache stored as int8 (recipe "kv=int8"; the quantized
 * KV caches of vLLM / TensorRT-LLM with one scale per token and head). Per
 * layer the caller passes
 *   k_cache, v_cache  int8  [max_seq, kv_heads * head_dim], row-major,
 *   k_scales, v_scales float32 [max_seq, kv_heads],
 * and a cached element is dequantized as
 *   K[t, h, d] = k_scales[t, h] * float(k_cache[t, h * head_dim + d])
 * (V likewise). Append: for each new token i (row t = pos + i) and kv head h,
 * separately for K and V, with x = k[i, h * head_dim : (h + 1) * head_dim]
 * widened to float32:
 *   amax  = max_d |x[d]|,   scale = amax / 127.0f  (float32 division),
 *   q[d]  = clamp(roundf(x[d] / scale), -127, 127)  (round half away from
 *           zero, float32 division; every q[d] = 0 when scale == 0),
 * stores q into the cache row and scale into the scales row. Then exactly the
 * attention of kiln_k_attention (causal GQA over rows [0, pos + i], softmax
 * with max subtraction, all math float32) with the dequantized K and V. The
 * result equals kiln_k_attention run on float32 caches holding the
 * dequantized values up to float accumulation order. q, k, v, out have the
 * element type of the suffix (float32, f16, bf16; 16-bit outputs rounded
 * once to nearest even); shapes as for kiln_k_attention. k, v must not alias
 * the caches; rows outside [pos, pos + n) are not written. Non-finite k / v
 * values give unspecified cache contents.
 *===----------------------------------------------------------------------===*/

void kiln_k_attention_kv8(const float *q, const float *k, const float *v,
                          int8_t *k_cache, int8_t *v_cache, float *k_scales,
                          float *v_scales, float *out, int64_t n, int64_t pos,
                          int64_t heads, int64_t kv_heads, int64_t head_dim,
                          int64_t max_seq, float scale);
void kiln_k_attention_kv8_f16(const kiln_f16_t *q, const kiln_f16_t *k,
                              const kiln_f16_t *v, int8_t *k_cache,
                              int8_t *v_cache, float *k_scales,
                              float *v_scales, kiln_f16_t *out, int64_t n,
                              int64_t pos, int64_t heads, int64_t kv_heads,
                              int64_t head_dim, int64_t max_seq, float scale);
void kiln_k_attention_kv8_bf16(const kiln_bf16_t *q, const kiln_bf16_t *k,
                               const kiln_bf16_t *v, int8_t *k_cache,
                               int8_t *v_cache, float *k_scales,
                               float *v_scales, kiln_bf16_t *out, int64_t n,
                               int64_t pos, int64_t heads, int64_t kv_heads,
                               int64_t head_dim, int64_t max_seq, float scale);

/*===-- FP8 E4M3 KV cache: per-token, per-kv-head scales ------------------===*
 *
 * Attention over a KV cache stored as 8-bit floats (recipe "kv=fp8"; the FP8
 * KV caches of vLLM / TensorRT-LLM with one scale per token and head). The
 * format is E4M3FN of the OCP 8-bit Floating Point Specification (OFP8,
 * rev. 1.0, 2023): bit 7 sign, 4 exponent bits with bias 7, 3 mantissa bits;
 * exponent 0 is subnormal (2^-6 * m / 8), S.1111.111 is NaN, there are no
 * infinities, the largest magnitude is S.1111.110 = 448. Per layer the caller
 * passes
 *   k_cache, v_cache  uint8 E4M3FN codes [max_seq, kv_heads * head_dim],
 *   k_scales, v_scales float32 [max_seq, kv_heads],
 * and a cached element is dequantized as
 *   K[t, h, d] = k_scales[t, h] * e4m3(k_cache[t, h * head_dim + d])
 * (V likewise; e4m3(c) the exact value of code c). Append: for each new token
 * i (row t = pos + i) and kv head h, separately for K and V, with x the
 * head's head_dim values widened to float32:
 *   amax  = max_d |x[d]|,   scale = amax / 448.0f  (float32 division),
 *   q[d]  = E4M3FN(x[d] / scale): float32 division, then round to nearest,
 *           ties to even, saturating to +-448 (every q[d] = +0 when
 *           scale == 0),
 * stores q into the cache row and scale into the scales row. Then exactly the
 * attention of kiln_k_attention with the dequantized K and V (float32 math).
 * Element types, shapes, aliasing and unspecified non-finite inputs as for
 * kiln_k_attention_kv8.
 *===----------------------------------------------------------------------===*/

void kiln_k_attention_kvf8(const float *q, const float *k, const float *v,
                           uint8_t *k_cache, uint8_t *v_cache, float *k_scales,
                           float *v_scales, float *out, int64_t n, int64_t pos,
                           int64_t heads, int64_t kv_heads, int64_t head_dim,
                           int64_t max_seq, float scale);
void kiln_k_attention_kvf8_f16(const kiln_f16_t *q, const kiln_f16_t *k,
                               const kiln_f16_t *v, uint8_t *k_cache,
                               uint8_t *v_cache, float *k_scales,
                               float *v_scales, kiln_f16_t *out, int64_t n,
                               int64_t pos, int64_t heads, int64_t kv_heads,
                               int64_t head_dim, int64_t max_seq, float scale);
void kiln_k_attention_kvf8_bf16(const kiln_bf16_t *q, const kiln_bf16_t *k,
                                const kiln_bf16_t *v, uint8_t *k_cache,
                                uint8_t *v_cache, float *k_scales,
                                float *v_scales, kiln_bf16_t *out, int64_t n,
                                int64_t pos, int64_t heads, int64_t kv_heads,
                                int64_t head_dim, int64_t max_seq, float scale);

/*===-- Centered keys: calibrated per-channel key mean, 8-bit KV caches ---===*
 *
 * The INT8 / FP8 caches above with keys stored relative to a calibrated mean
 * (kiln.attention with key_mean). One scale per (token, kv head) is set by
 * the largest |k[d]|; models whose keys have large per-channel offsets (the
 * same channel large for every token) waste the 8-bit grid on the offset, and
 * its rounding error lands in every attention logit. KVQuant (Hooper et al.
 * 2024, "KVQuant: Towards 10 Million Context Length LLM Inference with KV
 * Cache Quantization", sections 3.1-3.2) therefore quantizes keys per channel
 * before RoPE; here the cache keeps post-RoPE keys with per-token scales and
 * subtracts the calibrated pre-RoPE mean rotated to the key's position, which
 * is exact in real arithmetic since RoPE is linear.
 *
 * k_mean: float32 [kv_heads * head_dim] (also for the 16-bit variants), the
 * mean pre-RoPE key (the input of kiln_k_rope, adjacent-pair layout) of kv
 * head h and channel d at k_mean[h * head_dim + d]. The mean rotated to
 * position t, m_t, uses the rotation of kiln_k_rope (pairs (2i, 2i+1),
 * 2i < rot_dim, frequency theta^(-2i/head_dim)) evaluated in double:
 *   w_i = pow(double(theta), -double(2i) / double(head_dim)),
 *   c = cos(double(t) * w_i),  s = sin(double(t) * w_i),
 *   m_t[h, 2i]     = float(double(mu[h, 2i]) * c - double(mu[h, 2i+1]) * s),
 *   m_t[h, 2i + 1] = float(double(mu[h, 2i]) * s + double(mu[h, 2i+1]) * c),
 *   m_t[h, d]      = mu[h, d]   for d >= rot_dim (rot_dim even, <= head_dim),
 * with mu = k_mean. Implementations may evaluate c, s by an anchored
 * recurrence (exact at t a multiple of 64, then complex multiplication by
 * e^(i w_i) in double) that matches the direct formula to 1e-12 relative
 * before the rounding to float.
 * Append (new token i, row t = pos + i, kv head h): keys only, the quantizer
 * of the uncentered kernel sees x[d] = k[i, h * head_dim + d] - m_t[h, d]
 * (float32 subtraction, k widened exactly) and stores codes and scale exactly
 * as it would for x; values are stored as in the uncentered kernel. Read:
 *   K[t, h, d] = k_scales[t, h] * dequant(k_cache[t, h * head_dim + d])
 *                + m_t[h, d]        (float32),
 * V as in the uncentered kernel, then exactly the attention of the uncentered
 * kernel. With k_mean all zero the outputs and cache contents are
 * bit-identical to kiln_k_attention_kv8 / kiln_k_attention_kvf8. rot_dim and
 * theta are those of the kiln_k_rope call that rotated k. Element types,
 * shapes, aliasing and unspecified non-finite inputs as for
 * kiln_k_attention_kv8.
 *===----------------------------------------------------------------------===*/

void kiln_k_attention_kv8_centered(const float *q, const float *k,
                                   const float *v, int8_t *k_cache,
                                   int8_t *v_cache, float *k_scales,
                                   float *v_scales, const float *k_mean,
                                   float *out, int64_t n, int64_t pos,
                                   int64_t heads, int64_t kv_heads,
                                   int64_t head_dim, int64_t rot_dim,
                                   int64_t max_seq, float scale, float theta);
void kiln_k_attention_kv8_centered_f16(
    const kiln_f16_t *q, const kiln_f16_t *k, const kiln_f16_t *v,
    int8_t *k_cache, int8_t *v_cache, float *k_scales, float *v_scales,
    const float *k_mean, kiln_f16_t *out, int64_t n, int64_t pos, int64_t heads,
    int64_t kv_heads, int64_t head_dim, int64_t rot_dim, int64_t max_seq,
    float scale, float theta);
void kiln_k_attention_kv8_centered_bf16(
    const kiln_bf16_t *q, const kiln_bf16_t *k, const kiln_bf16_t *v,
    int8_t *k_cache, int8_t *v_cache, float *k_scales, float *v_scales,
    const float *k_mean, kiln_bf16_t *out, int64_t n, int64_t pos,
    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t rot_dim,
    int64_t max_seq, float scale, float theta);
void kiln_k_attention_kvf8_centered(const float *q, const float *k,
                                    const float *v, uint8_t *k_cache,
                                    uint8_t *v_cache, float *k_scales,
                                    float *v_scales, const float *k_mean,
                                    float *out, int64_t n, int64_t pos,
                                    int64_t heads, int64_t kv_heads,
                                    int64_t head_dim, int64_t rot_dim,
                                    int64_t max_seq, float scale, float theta);
void kiln_k_attention_kvf8_centered_f16(
    const kiln_f16_t *q, const kiln_f16_t *k, const kiln_f16_t *v,
    uint8_t *k_cache, uint8_t *v_cache, float *k_scales, float *v_scales,
    const float *k_mean, kiln_f16_t *out, int64_t n, int64_t pos, int64_t heads,
    int64_t kv_heads, int64_t head_dim, int64_t rot_dim, int64_t max_seq,
    float scale, float theta);
void kiln_k_attention_kvf8_centered_bf16(
    const kiln_bf16_t *q, const kiln_bf16_t *k, const kiln_bf16_t *v,
    uint8_t *k_cache, uint8_t *v_cache, float *k_scales, float *v_scales,
    const float *k_mean, kiln_bf16_t *out, int64_t n, int64_t pos,
    int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t rot_dim,
    int64_t max_seq, float scale, float theta);

/*===-- Paged KV cache (PagedAttention) -----------------------------------===*
 *
 * The KV cache of a serving engine is a pool of blocks of block_tokens
 * positions shared by many sequences (Kwon et al. 2023, "Efficient Memory
 * Management for Large Language Model Serving with PagedAttention"); a
 * sequence's block table maps its logical block i (positions
 * [i * B, (i + 1) * B), B = block_tokens) to a physical block, so position
 * t lives at pool row block_table[t / B] * B + t % B. One layer's pools:
 *   k_pool, v_pool   [num_blocks * B, kv_heads * head_dim] elements of
 *                    `format`: the activations' type for KILN_KV_PLAIN,
 *                    int8 codes for KILN_KV_INT8, E4M3FN codes for
 *                    KILN_KV_FP8 (the formats of the contiguous caches
 *                    above);
 *   k_scales, v_scales  float32 [num_blocks * B, kv_heads] (8-bit formats);
 *   k_mean           the centered keys' calibrated mean [kv_heads *
 *                    head_dim] with rot_dim and theta (8-bit formats;
 *                    NULL for uncentered keys), as kiln_k_attention_kv8_
 *                    centered.
 *===----------------------------------------------------------------------===*/

/// KV-cache formats of kiln_paged_kv.
enum { KILN_KV_PLAIN = 0, KILN_KV_INT8 = 1, KILN_KV_FP8 = 2 };

/// One layer of a paged KV cache seen by one sequence.
typedef struct kiln_paged_kv {
  int32_t format;             ///< KILN_KV_*
  int32_t block_tokens;       ///< B, positions per block (>= 1)
  void *k_pool, *v_pool;      ///< [num_blocks * B, kv_heads * head_dim]
  float *k_scales, *v_scales; ///< [num_blocks * B, kv_heads]; 8-bit only
  const float *k_mean;        ///< centered keys' mean, or NULL
  int64_t rot_dim;            ///< with k_mean: RoPE dimensions
  float theta;                ///< with k_mean: RoPE base
  const int32_t *block_table; ///< covers positions [0, pos + n)
} kiln_paged_kv;

/// kiln_k_attention (kiln_k_attention_window for window >= 1, the 8-bit
/// and centered variants for those formats) for n new tokens of one
/// sequence at positions [pos, pos + n) over the paged cache `kv`: the new
/// keys and values are stored at their positions' pool rows, then every new
/// token attends causally to positions [0, pos + i] (the last `window`
/// only, when window >= 1). q, k, v, out have the activation type `act`
/// (KILN_ELEM_F32 / _F16 / _BF16; a KILN_KV_PLAIN pool holds that type too)
/// and the shapes of kiln_k_attention. The arithmetic is the contiguous
/// kernel's, row for row: outputs and stored rows are bit-identical to it.
void kiln_k_paged_attention(const kiln_paged_kv *kv, int32_t act,
                            const void *q, const void *k, const void *v,
                            void *out, int64_t n, int64_t pos, int64_t heads,
                            int64_t kv_heads, int64_t head_dim, float scale,
                            int64_t window);

/*===-- Batched steps (continuous batching) -------------------------------===*
 *
 * One model step over several sequences: the T tokens of the step are rows
 * [0, T) of every activation, sequence s owning rows [row_start[s],
 * row_start[s] + row_count[s]) at positions [pos[s], pos[s] +
 * row_count[s]) (a decode token, or a chunk of a prompt). Linears and
 * elementwise ops treat the T rows as one matrix (decode of B sequences is
 * one GEMM over B rows); RoPE rotates each row by its own position and
 * attention runs per sequence over the paged cache.
 *===----------------------------------------------------------------------===*/

typedef struct kiln_batch {
  int32_t num_seqs;
  int32_t max_blocks;          ///< entries per row of block_tables
  const int32_t *row_start;    ///< [num_seqs]
  const int32_t *row_count;    ///< [num_seqs], each >= 1
  const int32_t *pos;          ///< [num_seqs] position of the first row
  const int32_t *block_tables; ///< [num_seqs, max_blocks]
  const int32_t *positions;    ///< [T] each row's position
  /// Rows that get logits (speculative decoding's verify chunks in a
  /// batched step): NULL, one per sequence (its last row); else
  /// logit_count[s] >= 1, the last logit_count[s] rows of sequence s, in
  /// order, num_logit_rows of them in all (kiln_k_step_last_rows, and the
  /// rows of the logits kiln_step writes).
  const int32_t *logit_count;  ///< [num_seqs] or NULL
  int32_t num_logit_rows;      ///< sum of logit_count (when set)
} kiln_batch;

/// kiln_k_rope (adjacent pairs, theta^(-2i / head_dim)) of `rows` rows of
/// heads * head_dim elements of type `elem` (KILN_ELEM_*), row r rotated
/// by the angle of position positions[r]; bit-identical to kiln_k_rope of
/// each row at its position. y may alias x.
void kiln_k_rope_rows(int32_t elem, const void *x, void *y, int64_t rows,
                      int64_t heads, int64_t head_dim, int64_t rot_dim,
                      const int32_t *positions, float theta);

/// kiln_k_paged_attention of every sequence of `batch` (kv->block_table is
/// ignored: sequence s uses row s of batch->block_tables) on its rows of q,
/// k, v and out. Each sequence's outputs and stored rows are bit-identical
/// to running it alone.
void kiln_k_paged_attention_batch(const kiln_paged_kv *kv,
                                  const kiln_batch *batch, int32_t act,
                                  const void *q, const void *k, const void *v,
                                  void *out, int64_t heads, int64_t kv_heads,
                                  int64_t head_dim, float scale,
                                  int64_t window);

/* The kernels the emitted kiln_step calls (kiln-lower-to-plan), reading the
 * step's batch and pools from the context. `elem` is the activations'
 * KILN_ELEM_* type. */

/// kiln_k_rope_rows of x [rows, heads * head_dim] at the rows' positions
/// ctx->batch->positions.
void kiln_k_step_rope(kiln_exec_ctx *ctx, const void *x, void *y,
                      int64_t rows, int64_t heads, int64_t head_dim,
                      int64_t rot_dim, float theta, int64_t elem);
/// kiln_k_paged_attention_batch over layer `layer` of ctx->kv_pages, whose
/// format must be `format` (KILN_KV_*, what the compiler planned; the
/// runtime allocates the pool from the same manifest entry).
void kiln_k_step_attention(kiln_exec_ctx *ctx, const void *q, const void *k,
                           const void *v, void *out, int64_t layer,
                           int64_t elem, int64_t format, int64_t heads,
                           int64_t kv_heads, int64_t head_dim, float scale,
                           int64_t window);
/// kiln_k_step_attention with dynamic block-sparse prefill chunks (a
/// kiln.attention with `sparse` in the batched step; plain pools only):
/// each sequence's chunk of n > 1 rows runs kiln_k_paged_attention_sparse,
/// its one-row decode steps the dense kernel. Sequences one after the
/// other: each sequence's rows are computed as when it runs alone.
void kiln_k_step_attention_sparse(
    kiln_exec_ctx *ctx, const void *q, const void *k, const void *v,
    void *out, int64_t layer, int64_t elem, int64_t format, int64_t heads,
    int64_t kv_heads, int64_t head_dim, float scale, int64_t window,
    float gamma, int64_t block, int64_t sink, int64_t local,
    int64_t min_budget, int64_t max_budget, int64_t min_tokens,
    int64_t streaming, int64_t stride);
/// kiln_k_attention_sparse's selection and arithmetic for one sequence's n
/// rows at [pos, pos + n) over the paged cache `kv` (KILN_KV_PLAIN of the
/// activation type `act`): the same block lists and outputs as the
/// contiguous kernel given the same rows, positions and cache contents.
/// Other formats run kiln_k_paged_attention.
void kiln_k_paged_attention_sparse(
    const kiln_paged_kv *kv, int32_t act, const void *q, const void *k,
    const void *v, void *out, int64_t n, int64_t pos, int64_t heads,
    int64_t kv_heads, int64_t head_dim, float scale, float gamma,
    int64_t block, int64_t sink, int64_t local, int64_t min_budget,
    int64_t max_budget, int64_t min_tokens, int64_t layer, int64_t streaming,
    int64_t stride);
/// kiln_k_step_attention of a centered 8-bit cache: keys stored minus the
/// RoPE-rotated mean k_mean [kv_heads * head_dim] (rot_dim, theta).
void kiln_k_step_attention_centered(kiln_exec_ctx *ctx, const void *q,
                                    const void *k, const void *v, void *out,
                                    int64_t layer, int64_t elem,
                                    int64_t format, int64_t heads,
                                    int64_t kv_heads, int64_t head_dim,
                                    float scale, int64_t window,
                                    const float *k_mean, int64_t rot_dim,
                                    float theta);
/// y[s, :] = x[row_start[s] + row_count[s] - 1, :] for every sequence s of
/// ctx->batch; with batch->logit_count, the last logit_count[s] rows of
/// each sequence in order (num_logit_rows rows); rows of `width` elements
/// of `elem`.
void kiln_k_step_last_rows(kiln_exec_ctx *ctx, const void *x, void *y,
                           int64_t width, int64_t elem);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RT_KERNEL_ABI_H */
