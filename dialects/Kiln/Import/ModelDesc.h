//===- ModelDesc.h - Checkpoint-neutral model description -------*- C++ -*-===//
//
// What every checkpoint importer (llama2.c, GGUF, Hugging Face, synthetic)
// produces: the Llama hyper-parameters, one WeightDesc per canonical weight
// (where its bytes live plus the pending transforms that turn them into the
// float32 [out, in] row-major tensor the graph expects), and the tokenizer.
// No weight data is held here: weights are read one tensor at a time by
// materializeWeight() when the artifact is written.
//
// The IR builder (LlamaBuilder) turns a ModelDesc into kiln graph IR; the
// same model from different formats yields the same ModelDesc apart from the
// `source` of each weight, hence the same graph.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IMPORT_MODELDESC_H
#define KILN_DIALECTS_KILN_IMPORT_MODELDESC_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mlir::kiln {

/// Storage dtype of a tensor inside its source file.
enum class StorageType {
  F32,  ///< IEEE binary32
  F16,  ///< IEEE binary16
  BF16, ///< bfloat16 (upper half of binary32)
  Q8_0, ///< GGML Q8_0: blocks of 32 weights, f16 scale d then 32 x int8 q;
        ///< w = d * q (ggml-quants.c dequantize_row_q8_0)
  Q4_0, ///< GGML Q4_0: blocks of 32 weights, f16 scale d then 16 bytes;
        ///< byte j holds element j (low nibble) and j + 16 (high nibble);
        ///< w = d * (q - 8) (ggml-quants.c dequantize_row_q4_0)
  /// The other GGML block formats, decoded by the codec in
  /// runtime/include/kiln_rt/block_formats.h (layouts documented there):
  /// legacy blocks of 32 (Q4_1, Q5_0, Q5_1) and K-quant super-blocks of 256.
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  I32,  ///< little-endian int32 (GPTQ/AWQ packed nibbles); only the source
        ///< of a Repack transform, never decoded to float
  Synthetic, ///< no file: deterministic pseudo-random values (see seed)
};

/// Name used in IR and manifests: "f32", "f16", "bf16", "q8_0", "q4_0",
/// "q4_1", "q5_0", "q5_1", "q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "i32",
/// "synthetic".
llvm::StringRef stringifyStorageType(StorageType t);

/// The inverse of stringifyStorageType (std::nullopt for other names).
std::optional<StorageType> parseStorageType(llvm::StringRef name);

/// The GGML type id (kiln_rt/block_formats.h kiln_block_format) of a block
/// format storage (Q8_0, Q4_0 and the others above); std::nullopt for F32,
/// F16, BF16, I32 and Synthetic.
std::optional<int64_t> blockFormatOf(StorageType t);

/// The storage of GGML type id `ggmlType` when Kiln reads it (F32, F16,
/// BF16 and the block formats); std::nullopt otherwise.
std::optional<StorageType> storageOfGgmlType(uint32_t ggmlType);

/// Where the bytes of one tensor live.
struct TensorSource {
  std::string file;             ///< absolute path; "" for synthetic
  std::string tensor;           ///< tensor name inside the checkpoint
  StorageType storage = StorageType::F32;
  llvm::SmallVector<int64_t, 2> shape; ///< logical shape, row-major, e.g. [out, in]
  uint64_t offset = 0;          ///< byte offset of the first element in `file`
  uint64_t bytes = 0;           ///< stored byte count (0 for synthetic)
  uint64_t seed = 0;            ///< synthetic only: stream seed
  float scale = 0.02f;          ///< synthetic only: values in [-scale, scale]
  float center = 0.0f;          ///< synthetic only: added to every value, so
                                ///< values lie in [center - scale,
                                ///< center + scale] (norm weights: 1 and 0)
};

/// One pending transform, applied in order after decoding the source to f32.
struct WeightTransform {
  enum class Kind {
    /// Hugging Face q_proj/k_proj rows are in "rotate-half" order per head;
    /// reorder them into the adjacent-pair order the kiln.rope op uses
    /// (inverse of the permutation in HF's convert_llama_weights_to_hf.py).
    /// Param: heads (the number of heads of this projection).
    RopeHalfToAdjacent,
    /// Round-to-nearest integer quantization of each row. 8 bits (W8A16):
    /// symmetric, scale = max|w_row| / 127, q = round(w / scale) in
    /// [-127, 127], int8 values [out, in] and f32 scales [out]. 4 bits
    /// (W4A16 RTN): asymmetric per group of `groupSize` inputs (GPTQ's
    /// quantizer), packed two per byte [out, ceil(in / 2)], f32 scales and
    /// byte zero points [out, ceil(in / groupSize)]. `part` selects which of
    /// these the weight holds. Always last; materializeWeight stops before it
    /// (it yields the f32 tensor being quantized) and the artifact writer
    /// applies it. With `method` GPTQ (4 bits only) the writer runs GPTQ
    /// (Frantar et al. 2022, Algorithm 1) with the Hessian `hessian` of the
    /// calibration file `calibration` instead of plain rounding.
    Quantize,
    /// Exact conversion of a pre-quantized checkpoint tensor into one part of
    /// Kiln's quantized-linear layout (kernel_abi.h W8A16 / W4A16), see
    /// Prequantized.h. Always first: the source is the checkpoint's packed
    /// tensor, not float data, so materializeWeight() refuses it and the
    /// artifact writer calls materializeRepacked() instead; row transforms
    /// after it (RopeHalfToAdjacent) permute the repacked rows.
    Repack,
    /// Multiplies the rows (`axis` 0) or columns (`axis` 1) of a matrix, or
    /// the elements of a vector (`axis` 0), by `factors` (one per row /
    /// column / element). Written by the activation-aware passes (AWQ,
    /// SmoothQuant) that move a per-channel scale s from an op's input into
    /// its weight's columns and 1/s into the previous op's weight.
    Scale,
    /// Keeps `size` rows (`axis` 0; the elements of a vector) or columns
    /// (`axis` 1) from `offset` on: one rank's shard under tensor
    /// parallelism (kiln-partition; Megatron-LM, Shoeybi et al. 2019).
    /// Before any Quantize (the shard is quantized on its own); after a
    /// Repack only of its Blocks part (whole rows, or whole blocks of each
    /// row: the shard stays in its GGML format). Later transforms see the
    /// sliced shape.
    Slice,
  };
  /// Blocks: the whole tensor, kept in its GGML block format (Repack with
  /// `format` q4_0 ... q6_k): written verbatim as rows of raw blocks.
  enum class QuantPart { QWeight, Scales, Zeros, Blocks };
  enum class QuantMethod { RTN, GPTQ };
  Kind kind;
  int64_t heads = 0;        ///< RopeHalfToAdjacent
  int64_t bits = 0;         ///< Quantize: 8 or 4; Repack: 8 or 4
  int64_t groupSize = 0;    ///< Quantize/Repack: 0 = one scale per row
  QuantPart part = QuantPart::QWeight; ///< Quantize, Repack
  std::string format;       ///< Repack: gptq, gptq_v2, awq, q8_0, q4_0; for
                            ///< part Blocks any GGML block format name
  int64_t rows = 0;         ///< Repack: out_features of the linear
  int64_t cols = 0;         ///< Repack: in_features of the linear
  QuantMethod method = QuantMethod::RTN; ///< Quantize
  std::string calibration;  ///< Quantize/GPTQ: calibration file path
  std::string hessian;      ///< Quantize/GPTQ: Hessian tensor in that file
  bool actOrder = false;    ///< Quantize/GPTQ: descending diag(H) order
  double damp = 0.01;       ///< Quantize/GPTQ: dampening, fraction of mean diag(H)
  int64_t axis = 0;         ///< Scale, Slice: 0 rows / vector elements, 1 columns
  int64_t offset = 0;       ///< Slice: first row / column kept
  int64_t size = 0;         ///< Slice: rows / columns kept
  std::vector<float> factors; ///< Scale: one factor per row/column/element
};

struct QuantizedWeight;

/// A weight of the model under its canonical name.
struct WeightDesc {
  /// Canonical names: "tok_embeddings" [vocab, dim]; per layer i:
  /// "layers.i.attention_norm" [dim], "layers.i.wq" [heads*hd, dim],
  /// "layers.i.wk" / "layers.i.wv" [kv_heads*hd, dim], "layers.i.wo"
  /// [dim, heads*hd], "layers.i.ffn_norm" [dim], "layers.i.w1" (gate)
  /// [hidden, dim], "layers.i.w2" (down) [dim, hidden], "layers.i.w3" (up)
  /// [hidden, dim]; with LlamaConfig::qkvBias "layers.i.bq" / "bk" / "bv"
  /// after "wv"; with ropeFreqFactors "rope_freqs" [head_dim / 2] after
  /// "tok_embeddings"; "norm" [dim]; "output" [vocab, dim] (for tied
  /// embeddings its source is the embedding tensor).
  std::string name;
  TensorSource source;
  std::vector<WeightTransform> transforms;
  /// Set when this linear weight is kept quantized from a pre-quantized
  /// checkpoint (Prequantized.h); `source` then names the checkpoint's
  /// packed weight tensor (for messages) and the graph reads the parts.
  std::shared_ptr<const QuantizedWeight> quantized;
  /// Written as f32 even when the model is compiled to f16/bf16 (set by the
  /// artifact writer for kiln.weight ops typed f32 in a 16-bit graph, e.g.
  /// the key means of key centering, which the kernels read as float).
  bool keepF32 = false;
  /// Horizontal fusion (kiln-fuse, the "concat_rows" transform): weights
  /// whose rows follow this one's, each materialized and written by its own
  /// recipe; the tensor is their row-wise concatenation (row-major, so the
  /// bytes of each part in order). Empty for every imported weight.
  std::vector<WeightDesc> concatRows;
};

/// A linear weight kept in Kiln's quantized layout: `bits`, `groupSize` as
/// on kiln.quantized_linear, and the weights "<name>.qweight",
/// "<name>.scales" and (4 bits) "<name>.zeros", each a Repack of one
/// checkpoint tensor.
struct QuantizedWeight {
  int64_t bits = 4;
  int64_t groupSize = 0;
  std::vector<WeightDesc> parts; ///< qweight, scales[, zeros]
};

/// RoPE context-extension scaling (kiln.rope `scaling`; the formulas are in
/// runtime/include/kiln_rt/rope_scaling.h).
struct RopeScaling {
  enum class Kind {
    None,    ///< plain RoPE
    Linear,  ///< positions / factor (transformers rope_type "linear")
    Dynamic, ///< dynamic NTK (rope_type "dynamic")
    Llama3,  ///< Llama 3.1 frequency bands (rope_type "llama3")
  };
  Kind kind = Kind::None;
  float factor = 1.0f;
  float lowFreqFactor = 0.0f;  ///< Llama3
  float highFreqFactor = 0.0f; ///< Llama3
  int64_t originalMaxPositions = 0; ///< Dynamic, Llama3
};

/// Llama hyper-parameters (Touvron et al. 2023, Llama 2, table 1 / config).
/// The Llama-family variants Kiln reads are Llama plus the switches below:
/// Qwen2 (q/k/v biases), Mistral (sliding window), Llama 3.1 (RoPE scaling).
struct LlamaConfig {
  std::string name;          ///< human-readable model name
  std::string sourceFormat;  ///< "llama2c", "gguf", "hf", "synthetic"
  std::string sourcePath;    ///< what the user passed
  int64_t dim = 0;           ///< hidden size
  int64_t hiddenDim = 0;     ///< FFN intermediate size
  int64_t nLayers = 0;
  int64_t nHeads = 0;
  int64_t nKvHeads = 0;      ///< == nHeads unless GQA/MQA
  int64_t headDim = 0;       ///< dim / nHeads
  int64_t vocabSize = 0;
  int64_t maxSeqLen = 0;     ///< context length the model was trained for
  float rmsNormEps = 1e-5f;
  float ropeTheta = 10000.0f;
  bool tiedEmbeddings = false;
  /// "llama", "qwen2" or "mistral" (what the checkpoint called itself).
  std::string architecture = "llama";
  RopeScaling ropeScaling;
  /// The checkpoint carries per-pair RoPE frequency divisors (GGUF
  /// rope_freqs.weight): canonical weight "rope_freqs" [headDim / 2].
  bool ropeFreqFactors = false;
  /// q/k/v projection biases (Qwen2): canonical weights "layers.i.bq"
  /// [heads*hd], "layers.i.bk" / "layers.i.bv" [kv_heads*hd].
  bool qkvBias = false;
  /// Sliding-window attention over the last `slidingWindow` positions in
  /// every layer (Mistral); 0 = full causal attention.
  int64_t slidingWindow = 0;
};

/// Tokenizer data, normalised to SentencePiece conventions (docs/artifact.md,
/// "tokenizer.json"): "▁" for space, "<0xXX>" byte pieces, "<s>"/"</s>".
/// "byte_bpe" tokenizers (GPT-2 style byte-level BPE) instead spell normal
/// pieces in the GPT-2 byte alphabet and keep control / user-defined pieces
/// as their raw text.
struct TokenizerDesc {
  /// "spm" (merge by score), "bpe" (by rank) or "byte_bpe" (byte-level BPE
  /// by rank after the regex pre-tokenizer).
  std::string model = "spm";
  /// The file the tokenizer was read from when it is not the model file
  /// itself (a llama2.c tok*.bin found beside the checkpoint or given with
  /// --tokenizer); "" otherwise. Tools refuse to write an output over it.
  std::string file;
  std::vector<std::string> pieces;
  std::vector<float> scores;
  std::vector<int32_t> types; ///< 1 normal, 2 unknown, 3 control, 4 user, 6 byte
  std::vector<std::string> merges; ///< bpe only: "left right", rank = index
  int32_t bosId = 1, eosId = 2;
  int32_t unkId = 0; ///< -1: no unknown piece (unknown code points dropped)
  bool addBos = true;
  bool addDummyPrefix = true;
  /// Add the dummy prefix only when the text does not already start with a
  /// space (Hugging Face Metaspace); false: always (SentencePiece).
  bool prefixIfNoSpace = false;
  bool byteFallback = true;
  /// Consecutive unknown code points give one unk id (HF BPE fuse_unk,
  /// SentencePiece); false: one unk id per code point.
  bool fuseUnk = false;
  /// Append EOS to encoded prompts (GGUF add_eos_token, HF post-processor).
  bool addEos = false;
  /// byte_bpe: a word that is a piece is one token without merging (HF BPE
  /// ignore_merges; llama.cpp's Llama 3 vocabulary).
  bool ignoreMerges = false;
  /// byte_bpe: the pre-tokenizer's name ("smollm", "llama-bpe", "qwen2",
  /// "gpt2", "default", or "hf" for one read from a tokenizer.json) and its
  /// PCRE2 patterns, applied in order as Hugging Face Split(Isolated).
  std::string preTokenizer;
  std::vector<std::string> preTokenizerRegexes;
  /// byte_bpe: "" or "nfc" (Unicode NFC of the text between added tokens,
  /// Hugging Face's NFC normalizer; Qwen2).
  std::string normalizer;
  /// Things the user should know that are not errors (kiln-compile prints
  /// them as notes), e.g. a pre-tokenizer chosen by default.
  std::vector<std::string> notes;
};

/// The model's chat template (docs/artifact.md, "chat_template.jinja") and
/// the tokens that end an assistant turn.
struct ChatDesc {
  std::string tmpl;   ///< Jinja2 source; empty: the checkpoint has none
  std::string source; ///< where it came from, for messages
  /// Generation stops at any of these (as llama.cpp stops at EOS, EOT and
  /// EOM): GGUF tokenizer.ggml.eot_token_id / eom_token_id, HF
  /// generation_config.json eos_token_id, then the tokenizer's EOS.
  std::vector<int32_t> endOfTurnIds;
};

struct ModelDesc {
  LlamaConfig config;
  ChatDesc chat;
  std::vector<WeightDesc> weights; ///< in canonical order (see WeightDesc)
  TokenizerDesc tokenizer;         ///< exactly config.vocabSize pieces
  /// Things the importer resolved that the user should know (e.g. a tied
  /// config whose checkpoint carries a different classifier); the tools
  /// print each as "<tool>: note: <text>" on stderr.
  std::vector<std::string> notes;

  /// Returns the weight with canonical name `name`, or nullptr.
  const WeightDesc *lookup(llvm::StringRef name) const;
};

/// A canonical weight name and the shape the configuration implies for it.
struct CanonicalWeight {
  std::string name;
  llvm::SmallVector<int64_t, 2> shape;
};

/// All canonical weights of `config`, in canonical order (see WeightDesc).
std::vector<CanonicalWeight> canonicalWeights(const LlamaConfig &config);

/// Imports a model from `spec`:
///   * a llama2.c checkpoint `*.bin` (tokenizer: `tokenizer` if given, else a
///     `tok*.bin` / `tokenizer.bin` beside it);
///   * a GGUF v3 file `*.gguf` (architecture `llama`; tokenizer: `tokenizer`
///     if given, else its `tokenizer.ggml.*` keys);
///   * a Hugging Face directory with `config.json` and `*.safetensors`
///     (tokenizer: `tokenizer` if given, else tokenizer.json or
///     tokenizer.model in it);
///   * `synthetic:<shape>` with shape one of llama-2-7b, llama-2-13b,
///     llama-110m, stories260k (a generated placeholder vocabulary).
/// Files are recognised by content first (GGUF magic; safetensors files and
/// JSON files get an error saying what they are), then by extension; a file
/// that is neither a .bin nor has a plausible llama2.c header is reported
/// as an unrecognised format.
/// A model without a tokenizer is an error. The tokenizer must have exactly
/// vocab_size pieces, except that a Hugging Face model's may have fewer
/// (padded embedding tables): it is then padded with "<pad_ID>" control
/// pieces, so `tokenizer` always ends up with vocab_size pieces.
/// Errors name the file, the byte offset or field and what was expected.
llvm::Expected<ModelDesc> importModel(llvm::StringRef spec,
                                      llvm::StringRef tokenizer = "");

/// The shape of `w`'s float tensor: source.shape narrowed by its Slice
/// transforms (what materializeWeight writes and a Quantize step reads).
std::vector<int64_t> floatShape(const WeightDesc &w);

/// Decodes `w` from its source, applies its transforms and writes the f32
/// result (product of floatShape(w) elements) to `out`. Reads only this
/// tensor's bytes. Errors name the file and offset.
llvm::Error materializeWeight(const WeightDesc &w, llvm::MutableArrayRef<float> out);

} // namespace mlir::kiln

#endif // KILN_DIALECTS_KILN_IMPORT_MODELDESC_H
