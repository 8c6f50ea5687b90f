//===- LlamaBuilder.cpp - ModelDesc to kiln graph IR ----------------------===//

#include "dialects/Kiln/Builder/LlamaBuilder.h"
#include "dialects/Kiln/IR/KilnOps.h"
#include "kiln_rt/block_formats.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CheckedArithmetic.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::kiln;

namespace {
class LlamaGraphBuilder {
public:
  LlamaGraphBuilder(MLIRContext *ctx, const ModelDesc &desc, ModuleOp module,
                    int64_t maxSeq, Type elementType, Type kvType)
      : ctx(ctx), desc(desc), cfg(desc.config), module(module),
        builder(ctx), loc(UnknownLoc::get(ctx)), f32(elementType) {
    cacheType = KVCacheType::get(ctx, cfg.nLayers, maxSeq, cfg.nKvHeads,
                                 cfg.headDim, kvType, /*summaryBlock=*/0);
  }

  LogicalResult declareWeights();
  void buildEntryPoint(StringRef name, int64_t tokens, int64_t maxTokens);

private:
  RankedTensorType act(int64_t width) {
    return RankedTensorType::get({tokens, width}, f32);
  }
  Value weight(StringRef name) {
    WeightOp w = weights.lookup(name);
    return WeightRefOp::create(builder, loc, w.getType(), name);
  }
  /// `x` times weight `name`: kiln.linear, or kiln.quantized_linear over the
  /// parts of a weight kept quantized from a pre-quantized checkpoint.
  Value linear(int64_t width, Value x, StringRef name);
  LogicalResult declareQuantized(const WeightDesc &w);
  /// kiln.rope of `x` ([tokens, width], `heads` heads) with the model's
  /// scaling or frequency factors.
  Value rope(int64_t width, Value x, Value pos, int64_t heads);

  MLIRContext *ctx;
  const ModelDesc &desc;
  const LlamaConfig &cfg;
  ModuleOp module;
  OpBuilder builder;
  Location loc;
  Type f32; // the compute element type (f32, f16 or bf16)
  KVCacheType cacheType;
  llvm::StringMap<WeightOp> weights;
  /// Weights kept quantized: name -> (bits, group_size).
  llvm::StringMap<std::pair<int64_t, int64_t>> quantized;
  /// Weights kept in a GGML block format: name -> format ("q4_k").
  llvm::StringMap<std::string> blockFormats;
  /// The `format` attribute of an op reading weight `name` (null if plain).
  StringAttr formatOf(StringRef name) {
    auto it = blockFormats.find(name);
    return it == blockFormats.end() ? StringAttr()
                                    : builder.getStringAttr(it->second);
  }
  int64_t tokens = ShapedType::kDynamic;
  /// The location of the ops built next: the op's name in the model
  /// ("layers.3.wq", "layers.3.attention"), which the trace and
  /// diagnostics show.
  Location at(const Twine &name) {
    return NameLoc::get(builder.getStringAttr(name));
  }
};
} // namespace

/// Repack parameters in IR (see Prequantized.h and KilnAttrs.td).
static Attribute repackAttr(OpBuilder &b, const WeightTransform &t) {
  StringRef part = t.part == WeightTransform::QuantPart::QWeight  ? "qweight"
                   : t.part == WeightTransform::QuantPart::Scales ? "scales"
                                                                  : "zeros";
  return WeightTransformAttr::get(
      b.getContext(), "repack",
      b.getDictionaryAttr(
          {b.getNamedAttr("format", b.getStringAttr(t.format)),
           b.getNamedAttr("part", b.getStringAttr(part)),
           b.getNamedAttr("bits", b.getI64IntegerAttr(t.bits)),
           b.getNamedAttr("group_size", b.getI64IntegerAttr(t.groupSize)),
           b.getNamedAttr("rows", b.getI64IntegerAttr(t.rows)),
           b.getNamedAttr("cols", b.getI64IntegerAttr(t.cols))}));
}

LogicalResult LlamaGraphBuilder::declareQuantized(const WeightDesc &w) {
  const QuantizedWeight &q = *w.quantized;
  int64_t out = w.source.shape[0], in = w.source.shape[1];
  int64_t groups = q.groupSize ? llvm::divideCeilSigned(in, q.groupSize) : 0;
  Type i8 = builder.getI8Type(), f32Type = builder.getF32Type();
  for (const WeightDesc &p : q.parts) {
    const WeightTransform &r = p.transforms.front();
    RankedTensorType type;
    switch (r.part) {
    case WeightTransform::QuantPart::QWeight:
      type = RankedTensorType::get(
          {out, q.bits == 4 ? llvm::divideCeilSigned(in, int64_t(2)) : in}, i8);
      break;
    case WeightTransform::QuantPart::Scales:
      type = groups ? RankedTensorType::get({out, groups}, f32Type)
                    : RankedTensorType::get({out}, f32Type);
      break;
    case WeightTransform::QuantPart::Zeros:
      type = RankedTensorType::get({out, groups}, i8);
      break;
    }
    auto source = WeightSourceAttr::get(
        ctx, p.source.file, p.source.tensor,
        stringifyStorageType(p.source.storage),
        DenseI64ArrayAttr::get(ctx, p.source.shape), p.source.offset,
        p.source.bytes, 0, FloatAttr(), FloatAttr());
    SmallVector<Attribute> transforms = {repackAttr(builder, r)};
    for (const WeightTransform &t : ArrayRef(p.transforms).drop_front()) {
      if (t.kind != WeightTransform::Kind::RopeHalfToAdjacent)
        return emitError(loc) << "weight '" << p.name
                              << "': only row reorderings can follow a "
                                 "repack step";
      transforms.push_back(WeightTransformAttr::get(
          ctx, "rope_half_to_adjacent",
          DictionaryAttr::get(
              ctx, {builder.getNamedAttr(
                       "heads", builder.getI64IntegerAttr(t.heads))})));
    }
    weights[p.name] = WeightOp::create(builder, loc, p.name, type, source,
                                       builder.getArrayAttr(transforms));
  }
  quantized[w.name] = {q.bits, q.groupSize};
  return success();
}

Value LlamaGraphBuilder::linear(int64_t width, Value x, StringRef name) {
  loc = at(name);
  auto it = quantized.find(name);
  if (it == quantized.end())
    return LinearOp::create(builder, loc, act(width), x, weight(name),
                            formatOf(name), /*act_quant=*/StringAttr());
  auto [bits, groupSize] = it->second;
  std::string base = name.str();
  Value zeros = bits == 4 ? weight(base + ".zeros") : Value();
  return QuantizedLinearOp::create(
      builder, loc, act(width), x, weight(base + ".qweight"),
      weight(base + ".scales"), zeros, builder.getI64IntegerAttr(bits),
      builder.getI64IntegerAttr(groupSize), /*act_quant=*/StringAttr(),
      /*act_scale=*/FloatAttr());
}

Value LlamaGraphBuilder::rope(int64_t width, Value x, Value pos,
                              int64_t heads) {
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };
  auto f32Attr = [&](float v) { return builder.getF32FloatAttr(v); };
  const RopeScaling &rs = cfg.ropeScaling;
  StringAttr kind;
  FloatAttr low, high;
  IntegerAttr original;
  switch (rs.kind) {
  case RopeScaling::Kind::None:
    break;
  case RopeScaling::Kind::Linear:
    kind = builder.getStringAttr("linear");
    break;
  case RopeScaling::Kind::Dynamic:
    kind = builder.getStringAttr("dynamic");
    original = i64(rs.originalMaxPositions);
    break;
  case RopeScaling::Kind::Llama3:
    kind = builder.getStringAttr("llama3");
    low = f32Attr(rs.lowFreqFactor);
    high = f32Attr(rs.highFreqFactor);
    original = i64(rs.originalMaxPositions);
    break;
  }
  Value factors = cfg.ropeFreqFactors ? weight("rope_freqs") : Value();
  float factor = rs.kind == RopeScaling::Kind::None ? 1.0f : rs.factor;
  return RopeOp::create(builder, loc, act(width), x, pos, factors, i64(heads),
                        i64(cfg.headDim), i64(cfg.headDim),
                        f32Attr(cfg.ropeTheta), f32Attr(factor), kind, low,
                        high, original);
}

LogicalResult LlamaGraphBuilder::declareWeights() {
  builder.setInsertionPointToEnd(module.getBody());
  for (const CanonicalWeight &expected : canonicalWeights(cfg)) {
    StringRef name = expected.name;
    ArrayRef<int64_t> shape = expected.shape;
    const WeightDesc *w = desc.lookup(name);
    if (!w)
      return emitError(loc) << "model '" << cfg.name << "' has no weight '"
                            << name << "'";
    if (ArrayRef<int64_t>(w->source.shape) != shape)
      return emitError(loc)
             << "weight '" << name << "' (" << w->source.tensor << " in "
             << w->source.file << ") has shape ["
             << llvm::join(llvm::map_range(w->source.shape,
                                           [](int64_t d) { return std::to_string(d); }),
                           ", ")
             << "] but the model configuration implies ["
             << llvm::join(llvm::map_range(shape,
                                           [](int64_t d) { return std::to_string(d); }),
                           ", ")
             << "]";
    const WeightTransform *first =
        w->transforms.empty() ? nullptr : &w->transforms.front();
    bool blocks = first && first->kind == WeightTransform::Kind::Repack &&
                  first->part == WeightTransform::QuantPart::Blocks;
    if (blocks && f32.isF32()) {
      // A GGUF tensor kept in its GGML block format: raw blocks, i8 rows.
      std::optional<int64_t> format = blockFormatOf(w->source.storage);
      if (!format || shape.size() != 2 || w->transforms.size() != 1)
        return emitError(loc) << "weight '" << name
                              << "' cannot be kept in a block format";
      int64_t rowBytes =
          shape[1] / kiln_block_elems(*format) * kiln_block_bytes(*format);
      auto source = WeightSourceAttr::get(
          ctx, w->source.file, w->source.tensor,
          stringifyStorageType(w->source.storage),
          DenseI64ArrayAttr::get(ctx, w->source.shape), w->source.offset,
          w->source.bytes, 0, FloatAttr(), FloatAttr());
      auto repack = WeightTransformAttr::get(
          ctx, "repack",
          builder.getDictionaryAttr(
              {builder.getNamedAttr("format",
                                    builder.getStringAttr(first->format)),
               builder.getNamedAttr("part", builder.getStringAttr("blocks")),
               builder.getNamedAttr("rows", builder.getI64IntegerAttr(shape[0])),
               builder.getNamedAttr("cols",
                                    builder.getI64IntegerAttr(shape[1]))}));
      weights[name] = WeightOp::create(
          builder, loc, name,
          RankedTensorType::get({shape[0], rowBytes}, builder.getI8Type()),
          source, builder.getArrayAttr({repack}));
      blockFormats[name] = first->format;
      continue;
    }
    if (w->quantized) {
      if (shape.size() != 2 || name == "tok_embeddings" || name == "output")
        return emitError(loc) << "weight '" << name
                              << "' cannot be kept quantized (only the "
                                 "projections of the layers can)";
      if (failed(declareQuantized(*w)))
        return failure();
      continue;
    }
    bool synthetic = w->source.storage == StorageType::Synthetic;
    auto source = WeightSourceAttr::get(
        ctx, w->source.file, w->source.tensor,
        stringifyStorageType(w->source.storage),
        DenseI64ArrayAttr::get(ctx, w->source.shape), w->source.offset,
        w->source.bytes, w->source.seed,
        synthetic ? builder.getF32FloatAttr(w->source.scale) : FloatAttr(),
        synthetic ? builder.getF32FloatAttr(w->source.center) : FloatAttr());
    SmallVector<Attribute> transforms;
    if (w->source.storage != StorageType::F32 &&
        w->source.storage != StorageType::Synthetic)
      transforms.push_back(WeightTransformAttr::get(
          ctx, "dequantize", DictionaryAttr::get(ctx, {})));
    // Block formats with a 16-bit compute type: decoded to that type (the
    // block kernels compute in float32 only).
    ArrayRef<WeightTransform> pending = w->transforms;
    if (blocks)
      pending = pending.drop_front();
    for (const WeightTransform &t : pending) {
      switch (t.kind) {
      case WeightTransform::Kind::RopeHalfToAdjacent:
        transforms.push_back(WeightTransformAttr::get(
            ctx, "rope_half_to_adjacent",
            DictionaryAttr::get(ctx, {builder.getNamedAttr(
                                         "heads", builder.getI64IntegerAttr(
                                                      t.heads))})));
        break;
      case WeightTransform::Kind::Quantize:
      case WeightTransform::Kind::Scale:
        // Importers describe checkpoints; quantization and activation-aware
        // scaling are passes' decisions.
        return emitError(loc) << "weight '" << name
                              << "' arrives with a quantize or scale "
                                 "transform; importers do not produce those";
      case WeightTransform::Kind::Repack:
        return emitError(loc) << "weight '" << name
                              << "' has a repack transform outside a "
                                 "kept-quantized weight";
      }
    }
    // RoPE frequency divisors stay float32 (kiln_k_rope_factors reads
    // float in every graph dtype).
    Type elem = name == "rope_freqs" ? builder.getF32Type() : f32;
    auto op = WeightOp::create(builder, loc, name,
                               RankedTensorType::get(shape, elem), source,
                               builder.getArrayAttr(transforms));
    weights[name] = op;
  }
  return success();
}

void LlamaGraphBuilder::buildEntryPoint(StringRef name, int64_t numTokens,
                                        int64_t maxTokens) {
  tokens = numTokens;
  auto tokensType = RankedTensorType::get({tokens}, builder.getI32Type());
  auto logitsType =
      RankedTensorType::get({1, cfg.vocabSize}, builder.getF32Type());
  builder.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(
      builder, loc, name,
      builder.getFunctionType({tokensType, builder.getIndexType(), cacheType},
                              {logitsType}));
  func->setAttr("kiln.max_tokens", builder.getI64IntegerAttr(maxTokens));
  Block *entry = func.addEntryBlock();
  builder.setInsertionPointToStart(entry);
  Value tokenIds = entry->getArgument(0), pos = entry->getArgument(1),
        cache = entry->getArgument(2);

  int64_t qDim = cfg.nHeads * cfg.headDim, kvDim = cfg.nKvHeads * cfg.headDim;
  auto eps = builder.getF32FloatAttr(cfg.rmsNormEps);
  auto scale = builder.getF32FloatAttr(1.0f / std::sqrt(float(cfg.headDim)));
  auto i64 = [&](int64_t v) { return builder.getI64IntegerAttr(v); };

  loc = at("tok_embeddings");
  Value h = EmbeddingOp::create(builder, loc, act(cfg.dim), tokenIds,
                                weight("tok_embeddings"),
                                formatOf("tok_embeddings"));
  for (int64_t i = 0; i < cfg.nLayers; ++i) {
    std::string p = "layers." + std::to_string(i) + ".";
    // Attention block: h += wo(attention(rope(wq x), rope(wk x), wv x)).
    loc = at(p + "attention_norm");
    Value x = RmsNormOp::create(builder, loc, act(cfg.dim), h,
                                weight(p + "attention_norm"), eps);
    Value q = linear(qDim, x, p + "wq");
    Value k = linear(kvDim, x, p + "wk");
    Value v = linear(kvDim, x, p + "wv");
    if (cfg.qkvBias) {
      loc = at(p + "bq");
      q = AddBiasOp::create(builder, loc, q, weight(p + "bq"));
      loc = at(p + "bk");
      k = AddBiasOp::create(builder, loc, k, weight(p + "bk"));
      loc = at(p + "bv");
      v = AddBiasOp::create(builder, loc, v, weight(p + "bv"));
    }
    loc = at(p + "rope_q");
    q = rope(qDim, q, pos, cfg.nHeads);
    loc = at(p + "rope_k");
    k = rope(kvDim, k, pos, cfg.nKvHeads);
    loc = at(p + "attention");
    Value a = AttentionOp::create(
        builder, loc, act(qDim), q, k, v, cache, pos, i64(i), i64(cfg.nHeads),
        i64(cfg.nKvHeads), i64(cfg.headDim), scale, builder.getBoolAttr(true),
        /*key_mean=*/Value(), /*key_mean_theta=*/FloatAttr(),
        /*key_mean_rotary_dim=*/IntegerAttr(),
        cfg.slidingWindow > 0 ? i64(cfg.slidingWindow) : IntegerAttr(),
        /*sparse=*/SparseAttentionAttr());
    Value o = linear(cfg.dim, a, p + "wo");
    loc = at(p + "attention_residual");
    h = AddOp::create(builder, loc, h, o);
    // FFN block: h += w2(silu(w1 x) * w3 x).
    loc = at(p + "ffn_norm");
    x = RmsNormOp::create(builder, loc, act(cfg.dim), h,
                          weight(p + "ffn_norm"), eps);
    Value gate = linear(cfg.hiddenDim, x, p + "w1");
    Value up = linear(cfg.hiddenDim, x, p + "w3");
    loc = at(p + "ffn_swiglu");
    Value act1 = SiluOp::create(builder, loc, gate);
    loc = at(p + "ffn_swiglu");
    Value prod = MulOp::create(builder, loc, act1, up);
    Value down = linear(cfg.dim, prod, p + "w2");
    loc = at(p + "ffn_residual");
    h = AddOp::create(builder, loc, h, down);
  }
  loc = at("norm");
  h = RmsNormOp::create(builder, loc, act(cfg.dim), h, weight("norm"), eps);
  loc = at("output");
  Value logits = LogitsOp::create(builder, loc, logitsType, h, weight("output"),
                                  formatOf("output"), /*act_quant=*/StringAttr());
  func::ReturnOp::create(builder, loc, logits);
  loc = UnknownLoc::get(ctx);
}

/// Refuses a context whose KV cache (allocated whole when a session starts)
/// needs more than kMaxKvCacheBytes, or whose size overflows 64 bits, with a
/// hint to --max-seq-len naming the bytes it would need and the context that
/// fits.
static LogicalResult checkKvCacheSize(MLIRContext *context,
                                      const LlamaConfig &cfg, int64_t maxSeq,
                                      Type kvType, bool fromFlag) {
  bool quantized = kvType.isInteger(8) || isa<Float8E4M3FNType>(kvType);
  int64_t elemBytes = kvType.getIntOrFloatBitWidth() / 8;
  // Per token and layer: keys and values, plus (8-bit caches) one f32 scale
  // per kv head for each.
  std::optional<int64_t> perToken =
      llvm::checkedMul<int64_t>(cfg.nKvHeads, cfg.headDim);
  if (perToken)
    perToken = llvm::checkedMul<int64_t>(*perToken, elemBytes);
  if (perToken && quantized)
    perToken = llvm::checkedAdd<int64_t>(*perToken, cfg.nKvHeads * 4);
  if (perToken)
    perToken = llvm::checkedMul<int64_t>(*perToken, 2 * cfg.nLayers);
  std::optional<int64_t> total =
      perToken ? llvm::checkedMul<int64_t>(*perToken, maxSeq) : std::nullopt;
  if (total && *total <= kMaxKvCacheBytes)
    return success();
  std::string need;
  llvm::raw_string_ostream os(need);
  if (total)
    os << *total << " bytes (" << llvm::divideCeil(*total, int64_t(1) << 30)
       << " GiB)";
  else
    os << "more than 2^63 bytes";
  std::string typeName; // unquoted, unlike a Type streamed into a diagnostic
  llvm::raw_string_ostream(typeName) << kvType;
  InFlightDiagnostic diag = emitError(UnknownLoc::get(context));
  diag << (fromFlag ? "a context of " : "the model's context of ") << maxSeq
       << " tokens" << (fromFlag ? " (--max-seq-len)" : " (its max_seq_len)")
       << " needs a KV cache of " << need << " for " << cfg.nLayers
       << " layers of " << cfg.nKvHeads << " kv heads x " << cfg.headDim
       << " " << typeName << ", more than the limit of " << kMaxKvCacheBytes
       << " bytes (" << (kMaxKvCacheBytes >> 30) << " GiB)";
  if (perToken && *perToken > 0) {
    int64_t fits = kMaxKvCacheBytes / *perToken;
    diag << ": pass --max-seq-len N with N <= " << fits
         << " to plan a shorter context";
  }
  return diag;
}

FailureOr<OwningOpRef<ModuleOp>>
mlir::kiln::buildLlamaModule(MLIRContext *context, const ModelDesc &desc,
                             const LlamaBuildOptions &options) {
  context->loadDialect<KilnDialect, func::FuncDialect>();
  const LlamaConfig &cfg = desc.config;
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(context));
  int64_t maxSeq = options.maxSeqLen > 0 ? std::min(options.maxSeqLen, cfg.maxSeqLen)
                                         : cfg.maxSeqLen;
  int64_t maxTokens = options.maxPrefillTokens > 0 ? options.maxPrefillTokens
                                                   : std::min<int64_t>(maxSeq, 512);
  maxTokens = std::min(maxTokens, maxSeq);

  Builder b(context);
  NamedAttrList model;
  model.append("name", b.getStringAttr(cfg.name));
  model.append("architecture", b.getStringAttr(cfg.architecture));
  model.append("source_format", b.getStringAttr(cfg.sourceFormat));
  model.append("dim", b.getI64IntegerAttr(cfg.dim));
  model.append("hidden_dim", b.getI64IntegerAttr(cfg.hiddenDim));
  model.append("n_layers", b.getI64IntegerAttr(cfg.nLayers));
  model.append("n_heads", b.getI64IntegerAttr(cfg.nHeads));
  model.append("n_kv_heads", b.getI64IntegerAttr(cfg.nKvHeads));
  model.append("head_dim", b.getI64IntegerAttr(cfg.headDim));
  model.append("vocab_size", b.getI64IntegerAttr(cfg.vocabSize));
  model.append("max_seq_len", b.getI64IntegerAttr(maxSeq));
  model.append("rms_norm_eps", b.getF32FloatAttr(cfg.rmsNormEps));
  model.append("rope_theta", b.getF32FloatAttr(cfg.ropeTheta));
  model.append("tied_embeddings", b.getBoolAttr(cfg.tiedEmbeddings));
  if (cfg.slidingWindow > 0)
    model.append("sliding_window", b.getI64IntegerAttr(cfg.slidingWindow));

  Type elementType;
  if (options.dtype == "f32")
    elementType = b.getF32Type();
  else if (options.dtype == "f16")
    elementType = b.getF16Type();
  else if (options.dtype == "bf16")
    elementType = b.getBF16Type();
  else
    return emitError(UnknownLoc::get(context))
           << "unsupported dtype '" << options.dtype
           << "' (expected f32, f16 or bf16)";
  Type kvType = elementType;
  if (options.kvDtype == "int8")
    kvType = b.getI8Type();
  else if (options.kvDtype == "fp8")
    kvType = b.getType<Float8E4M3FNType>();
  else if (!options.kvDtype.empty())
    return emitError(UnknownLoc::get(context))
           << "unsupported KV-cache type '" << options.kvDtype
           << "' (expected int8 or fp8)";
  model.append("dtype", b.getStringAttr(options.dtype));
  if (failed(checkKvCacheSize(context, cfg, maxSeq, kvType,
                              /*fromFlag=*/options.maxSeqLen > 0)))
    return failure();
  (*module)->setAttr("kiln.model", model.getDictionary(context));
  LlamaGraphBuilder graph(context, desc, *module, maxSeq, elementType, kvType);
  if (failed(graph.declareWeights()))
    return failure();
  graph.buildEntryPoint("prefill", ShapedType::kDynamic, maxTokens);
  graph.buildEntryPoint("decode", 1, 1);
  if (failed(mlir::verify(*module)))
    return failure();
  return module;
}
