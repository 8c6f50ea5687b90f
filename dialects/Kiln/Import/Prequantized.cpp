//===- Prequantized.cpp - GPTQ / AWQ / GGUF Q4_0 / Q8_0 kept quantized ----===//
//
// Import side: quantization_config parsing and the checks of each linear's
// packed tensors (see Prequantized.h for the formats). Materialization side:
// the exact repacking into Kiln's layout, one tensor at a time.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/Prequantized.h"

#include "dialects/Kiln/Import/ImportUtils.h"
#include "kiln_rt/block_formats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <cstring>

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

std::string HfQuantConfig::describe() const {
  std::string s = (method == "gptq" ? "GPTQ " : "AWQ ") + std::to_string(bits) +
                  "-bit, group size " + std::to_string(groupSize);
  if (method == "gptq")
    s += ", checkpoint_format " + format;
  return s;
}

Expected<std::optional<HfQuantConfig>>
parseHfQuantConfig(const json::Object &cfg, StringRef cfgPath) {
  const json::Value *v = cfg.get("quantization_config");
  if (!v || v->kind() == json::Value::Null)
    return std::optional<HfQuantConfig>();
  const json::Object *q = v->getAsObject();
  if (!q)
    return fileError(cfgPath, "field 'quantization_config' is not an object");
  HfQuantConfig c;
  c.configPath = cfgPath.str();
  std::optional<StringRef> method = q->getString("quant_method");
  if (!method)
    return fileError(cfgPath, "quantization_config has no string "
                              "'quant_method' (supported: gptq, awq)");
  c.method = method->lower();
  if (c.method != "gptq" && c.method != "awq")
    return fileError(cfgPath, "quantization_config.quant_method '" + *method +
                                  "' is not supported (supported: gptq, awq; "
                                  "or a float checkpoint)");
  auto intField = [&](StringRef key, int64_t &dst) -> Error {
    const json::Value *f = q->get(key);
    if (!f)
      return Error::success();
    std::optional<int64_t> i = f->getAsInteger();
    if (!i)
      return fileError(cfgPath,
                       "quantization_config." + key + " is not an integer");
    dst = *i;
    return Error::success();
  };
  // AutoAWQ writes "w_bit" / "q_group_size" in quant_config.json and
  // "bits" / "group_size" in config.json; accept both spellings.
  if (Error e = intField("w_bit", c.bits))
    return std::move(e);
  if (Error e = intField("bits", c.bits))
    return std::move(e);
  if (Error e = intField("q_group_size", c.groupSize))
    return std::move(e);
  if (Error e = intField("group_size", c.groupSize))
    return std::move(e);
  if (c.bits != 4)
    return fileError(cfgPath,
                     "quantization_config.bits = " + Twine(c.bits) + ": " +
                         (c.bits == 8 ? Twine("8-bit GPTQ/AWQ checkpoints are "
                                              "not supported (they have zero "
                                              "points; Kiln's 8-bit weights "
                                              "are symmetric)")
                                      : Twine("only 4-bit checkpoints are "
                                              "supported")));
  if (c.groupSize != -1 && (c.groupSize <= 0 || c.groupSize % 2 != 0))
    return fileError(cfgPath,
                     "quantization_config.group_size = " + Twine(c.groupSize) +
                         " is not supported (expected -1 for one "
                         "group per row, or a positive even number "
                         "such as 32 or 128)");
  if (c.method == "gptq") {
    c.descAct = q->getBoolean("desc_act").value_or(false);
    StringRef fmt = q->getString("checkpoint_format").value_or("gptq");
    if (fmt != "gptq" && fmt != "gptq_v2")
      return fileError(cfgPath, "quantization_config.checkpoint_format '" +
                                    fmt +
                                    "' is not supported (expected gptq or "
                                    "gptq_v2)");
    c.format = fmt.str();
    if (q->getBoolean("lm_head").value_or(false))
      return fileError(cfgPath, "quantization_config.lm_head is true: a "
                                "quantized classifier (lm_head) is not "
                                "supported");
    return std::optional<HfQuantConfig>(std::move(c));
  }
  StringRef version = q->getString("version").value_or("gemm");
  if (!version.equals_insensitive("gemm"))
    return fileError(cfgPath, "quantization_config.version '" + version +
                                  "' is not supported (only AutoAWQ's GEMM "
                                  "layout is)");
  if (!q->getBoolean("zero_point").value_or(true))
    return fileError(cfgPath, "quantization_config.zero_point is false: only "
                              "AWQ checkpoints with zero points are "
                              "supported");
  c.format = "awq";
  return std::optional<HfQuantConfig>(std::move(c));
}

static Expected<StorageType> storageOf(const CheckpointTensor &t,
                                       StringRef name,
                                       ArrayRef<StringRef> allowed) {
  if (!llvm::is_contained(allowed, t.dtype))
    return fileError(t.file, "tensor '" + name + "' has dtype " + t.dtype +
                                 " but " + join(allowed, " or ") +
                                 " was expected");
  if (t.dtype == "I32")
    return StorageType::I32;
  if (t.dtype == "F16")
    return StorageType::F16;
  if (t.dtype == "BF16")
    return StorageType::BF16;
  return StorageType::F32;
}

Expected<WeightDesc>
importHfQuantizedLinear(const HfQuantConfig &c, StringRef name,
                        StringRef prefix, ArrayRef<int64_t> shape,
                        TensorLookup lookup,
                        ArrayRef<WeightTransform> rowTransforms) {
  int64_t out = shape[0], in = shape[1];
  bool gptq = c.method == "gptq";
  std::string what = c.describe();
  auto get = [&](StringRef suffix) -> Expected<CheckpointTensor> {
    std::string n = (prefix + "." + suffix).str();
    std::optional<CheckpointTensor> t = lookup(n);
    if (!t)
      return fileError(c.configPath,
                       "missing tensor '" + n + "' (" + what +
                           " checkpoints store each linear as .qweight, "
                           ".qzeros and .scales)");
    return *t;
  };
  Expected<CheckpointTensor> qweight = get("qweight");
  if (!qweight)
    return qweight.takeError();
  Expected<CheckpointTensor> qzeros = get("qzeros");
  if (!qzeros)
    return qzeros.takeError();
  Expected<CheckpointTensor> scales = get("scales");
  if (!scales)
    return scales.takeError();

  // Packing needs whole int32 words: GPTQ packs along in, both along out.
  if (out % 8 != 0 || (gptq && in % 8 != 0))
    return fileError(qweight->file,
                     "tensor '" + prefix + ".qweight': " + what +
                         " needs out_features" +
                         (gptq ? " and in_features" : "") +
                         " to be multiples of 8 (eight 4-bit values per "
                         "int32), but " +
                         name + " is " + formatShape(shape));
  int64_t group = c.groupSize == -1 ? in : c.groupSize;
  if (!gptq && in % group != 0)
    return fileError(qweight->file,
                     "tensor '" + prefix + ".qweight': AWQ group size " +
                         Twine(group) + " does not divide in_features " +
                         Twine(in) + " of " + name);
  int64_t groups = divideCeilSigned(in, group);

  auto check = [&](const CheckpointTensor &t, StringRef suffix,
                   ArrayRef<int64_t> expected, ArrayRef<StringRef> dtypes,
                   StringRef meaning) -> Expected<StorageType> {
    std::string n = (prefix + "." + suffix).str();
    Expected<StorageType> st = storageOf(t, n, dtypes);
    if (!st)
      return st.takeError();
    if (ArrayRef<int64_t>(t.shape) != expected)
      return fileError(t.file, "tensor '" + n + "' has shape " +
                                   formatShape(t.shape) + " but " + what +
                                   " with " + name + " " + formatShape(shape) +
                                   " needs " + formatShape(expected) + " (" +
                                   meaning + ")");
    return st;
  };
  SmallVector<int64_t, 2> qShape = gptq ? SmallVector<int64_t, 2>{in / 8, out}
                                        : SmallVector<int64_t, 2>{in, out / 8};
  Expected<StorageType> qSt =
      check(*qweight, "qweight", qShape, {"I32"},
            gptq ? "[in/8, out]: eight 4-bit values per int32 along in"
                 : "[in, out/8]: eight 4-bit values per int32 along out");
  if (!qSt)
    return qSt.takeError();
  Expected<StorageType> zSt =
      check(*qzeros, "qzeros", {groups, out / 8}, {"I32"},
            "[groups, out/8], groups = ceil(in / group_size) = " +
                std::to_string(groups));
  if (!zSt)
    return zSt.takeError();
  Expected<StorageType> sSt =
      check(*scales, "scales", {groups, out}, {"F16", "BF16", "F32"},
            "[groups, out], groups = ceil(in / group_size) = " +
                std::to_string(groups));
  if (!sSt)
    return sSt.takeError();

  // g_idx: the group of each input column. Kiln's groups are contiguous, so
  // only the trivial g_idx[i] = i / group_size is exact; act-order
  // (desc_act) checkpoints permute it.
  if (gptq) {
    std::string n = (prefix + ".g_idx").str();
    if (std::optional<CheckpointTensor> gidx = lookup(n)) {
      if (!llvm::is_contained(ArrayRef<StringRef>{"I32", "I64"}, gidx->dtype) ||
          ArrayRef<int64_t>(gidx->shape) != ArrayRef<int64_t>{in})
        return fileError(gidx->file, "tensor '" + n + "' has dtype " +
                                         gidx->dtype + " and shape " +
                                         formatShape(gidx->shape) +
                                         " but I32 [" + Twine(in) +
                                         "] (the group of each input "
                                         "column) was expected");
      unsigned width = gidx->dtype == "I32" ? 4 : 8;
      if (gidx->bytes != uint64_t(in) * width)
        return fileError(gidx->file, "tensor '" + n + "' holds " +
                                         Twine(gidx->bytes) + " bytes, not " +
                                         Twine(uint64_t(in) * width));
      std::string raw(gidx->bytes, '\0');
      if (Error e = readFileRange(gidx->file, gidx->offset, raw,
                                  "tensor '" + n + "'"))
        return std::move(e);
      for (int64_t i = 0; i < in; ++i) {
        int64_t g = width == 4
                        ? static_cast<int32_t>(
                              support::endian::read32le(raw.data() + 4 * i))
                        : static_cast<int64_t>(
                              support::endian::read64le(raw.data() + 8 * i));
        if (g < 0 || g >= groups)
          return fileError(gidx->file, "tensor '" + n + "': g_idx[" + Twine(i) +
                                           "] = " + Twine(g) +
                                           " is outside [0, " + Twine(groups) +
                                           ") (the scales hold " +
                                           Twine(groups) + " groups)");
        if (g != i / group)
          return fileError(
              gidx->file,
              "tensor '" + n + "': g_idx[" + Twine(i) + "] = " + Twine(g) +
                  " but contiguous groups of " + Twine(group) + " give " +
                  Twine(i / group) +
                  "; act-order (desc_act) checkpoints whose groups are not "
                  "contiguous runs of input columns are not supported: "
                  "Kiln's 4-bit kernels read one scale and zero point per "
                  "contiguous group, and regrouping would change the "
                  "weights");
      }
    } else if (c.descAct) {
      return fileError(c.configPath,
                       "missing tensor '" + n +
                           "': desc_act is true, so the group of each input "
                           "column must be given by g_idx");
    }
  }

  auto part = [&](StringRef partName, const CheckpointTensor &t, StorageType st,
                  WeightTransform::QuantPart which, StringRef suffix) {
    WeightDesc p;
    p.name = (name + "." + partName).str();
    p.source.file = t.file;
    p.source.tensor = (prefix + "." + suffix).str();
    p.source.storage = st;
    p.source.shape = t.shape;
    p.source.offset = t.offset;
    p.source.bytes = t.bytes;
    WeightTransform r;
    r.kind = WeightTransform::Kind::Repack;
    r.format = c.format;
    r.part = which;
    r.bits = 4;
    r.groupSize = group;
    r.rows = out;
    r.cols = in;
    p.transforms.push_back(r);
    p.transforms.insert(p.transforms.end(), rowTransforms.begin(),
                        rowTransforms.end());
    return p;
  };
  auto q = std::make_shared<QuantizedWeight>();
  q->bits = 4;
  q->groupSize = group;
  q->parts.push_back(part("qweight", *qweight, *qSt,
                          WeightTransform::QuantPart::QWeight, "qweight"));
  q->parts.push_back(part("scales", *scales, *sSt,
                          WeightTransform::QuantPart::Scales, "scales"));
  q->parts.push_back(part("zeros", *qzeros, *zSt,
                          WeightTransform::QuantPart::Zeros, "qzeros"));
  WeightDesc w;
  w.name = name.str();
  w.source = q->parts.front().source;
  w.source.shape.assign(shape.begin(), shape.end());
  w.quantized = std::move(q);
  return w;
}

bool keepGgufQuantized(StorageType storage) {
  return storage == StorageType::Q4_0 ||
         (kKeepGgufQ8_0Quantized && storage == StorageType::Q8_0);
}

void keepGgufBlocks(WeightDesc &w) {
  WeightTransform r;
  r.kind = WeightTransform::Kind::Repack;
  r.format = stringifyStorageType(w.source.storage).str();
  r.part = WeightTransform::QuantPart::Blocks;
  r.rows = w.source.shape[0];
  r.cols = w.source.shape[1];
  w.transforms.insert(w.transforms.begin(), r);
}

void makeGgufQuantized(WeightDesc &w) {
  bool four = w.source.storage == StorageType::Q4_0;
  auto q = std::make_shared<QuantizedWeight>();
  q->bits = four ? 4 : 8;
  q->groupSize = 32;
  using P = WeightTransform::QuantPart;
  SmallVector<std::pair<StringRef, P>, 3> parts = {{"qweight", P::QWeight},
                                                   {"scales", P::Scales}};
  if (four)
    parts.push_back({"zeros", P::Zeros});
  for (auto [partName, which] : parts) {
    WeightDesc p;
    p.name = w.name + "." + partName.str();
    p.source = w.source;
    WeightTransform r;
    r.kind = WeightTransform::Kind::Repack;
    r.format = four ? "q4_0" : "q8_0";
    r.part = which;
    r.bits = q->bits;
    r.groupSize = 32;
    r.rows = w.source.shape[0];
    r.cols = w.source.shape[1];
    p.transforms.push_back(r);
    p.transforms.insert(p.transforms.end(), w.transforms.begin(),
                        w.transforms.end());
    q->parts.push_back(std::move(p));
  }
  w.quantized = std::move(q);
}

/// Whether `w` is a GGUF Q4_0 / Q8_0 linear that makeGgufQuantized repacked
/// and whose rows need no reordering.
static bool isRepackedGgufLinear(const WeightDesc &w) {
  if (!w.quantized || !w.transforms.empty() || w.quantized->parts.empty())
    return false;
  const WeightTransform *r = repackStep(w.quantized->parts.front());
  return r && (r->format == "q4_0" || r->format == "q8_0") &&
         w.source.shape.size() == 2;
}

bool hasRepackedGgufLinears(const ModelDesc &model) {
  return llvm::any_of(model.weights, isRepackedGgufLinear);
}

void keepGgufLinearsAsBlocks(ModelDesc &model) {
  for (WeightDesc &w : model.weights) {
    if (!isRepackedGgufLinear(w))
      continue;
    w.quantized.reset();
    keepGgufBlocks(w);
  }
}

std::string prequantizedRecipe(const ModelDesc &model) {
  const WeightDesc *first = nullptr;
  bool sameGroup = true;
  for (const WeightDesc &w : model.weights) {
    if (!w.quantized)
      continue;
    if (!first)
      first = &w;
    sameGroup &= w.quantized->groupSize == first->quantized->groupSize;
  }
  if (!first)
    return "";
  const QuantizedWeight &q = *first->quantized;
  std::string s = "prequantized-" + q.parts.front().transforms.front().format +
                  "-w" + std::to_string(q.bits);
  if (sameGroup)
    s += "g" + std::to_string(q.groupSize);
  return s;
}

const WeightTransform *repackStep(const WeightDesc &w) {
  if (w.transforms.empty() ||
      w.transforms.front().kind != WeightTransform::Kind::Repack)
    return nullptr;
  return &w.transforms.front();
}

Expected<RepackedLayout> repackedLayout(const WeightDesc &w) {
  const WeightTransform *r = repackStep(w);
  if (!r)
    return makeError("weight '" + w.name + "' has no repack step");
  int64_t rows = r->rows, cols = r->cols;
  if (r->part == WeightTransform::QuantPart::Blocks) {
    std::optional<int64_t> format = blockFormatOf(w.source.storage);
    if (!format || r->format != stringifyStorageType(w.source.storage) ||
        rows <= 0 || cols <= 0 || rows > (int64_t(1) << 24) ||
        cols > (int64_t(1) << 24) || cols % kiln_block_elems(*format) != 0)
      return makeError("weight '" + w.name + "': " + r->format +
                       " blocks of a " + Twine(rows) + " x " + Twine(cols) +
                       " " + stringifyStorageType(w.source.storage) +
                       " tensor are not a valid layout");
    RepackedLayout l;
    l.shape = {rows, cols / kiln_block_elems(*format) *
                         kiln_block_bytes(*format)};
    l.dtype = "i8";
    l.bytes = uint64_t(l.shape[0]) * uint64_t(l.shape[1]);
    return l;
  }
  if (rows <= 0 || cols <= 0 || rows > (int64_t(1) << 24) ||
      cols > (int64_t(1) << 24) || (r->bits != 4 && r->bits != 8) ||
      r->groupSize < 0 || (r->bits == 4 && r->groupSize == 0))
    return makeError("weight '" + w.name + "': repack of a " + Twine(rows) +
                     " x " + Twine(cols) + " " + Twine(r->bits) +
                     "-bit weight with group size " + Twine(r->groupSize) +
                     " is not a valid layout");
  RepackedLayout l;
  int64_t groups = r->groupSize ? divideCeilSigned(cols, r->groupSize) : 0;
  switch (r->part) {
  case WeightTransform::QuantPart::QWeight:
    l.shape = {rows, r->bits == 4 ? divideCeilSigned(cols, int64_t(2)) : cols};
    l.dtype = "i8";
    break;
  case WeightTransform::QuantPart::Scales:
    l.shape = groups ? SmallVector<int64_t, 2>{rows, groups}
                     : SmallVector<int64_t, 2>{rows};
    l.dtype = "f32";
    break;
  case WeightTransform::QuantPart::Zeros:
  case WeightTransform::QuantPart::Blocks: // handled above
    l.shape = {rows, groups};
    l.dtype = "i8";
    break;
  }
  l.bytes = uint64_t(l.dtype == "f32" ? 4 : 1);
  for (int64_t d : l.shape)
    l.bytes *= uint64_t(d);
  return l;
}

namespace {
/// The source tensor of one repack, read whole, with bounds-checked access.
struct Packed {
  const WeightDesc &w;
  std::string raw;

  Error error(const Twine &msg) const {
    return fileError(w.source.file, "tensor '" + w.source.tensor + "': " + msg);
  }
  uint32_t u32(uint64_t i) const {
    return support::endian::read32le(raw.data() + 4 * i);
  }
  /// A 16- or 32-bit float scale, widened exactly to f32.
  float scale(uint64_t i) const {
    switch (w.source.storage) {
    case StorageType::F16:
      return halfToFloat(support::endian::read16le(raw.data() + 2 * i));
    case StorageType::BF16:
      return bf16ToFloat(support::endian::read16le(raw.data() + 2 * i));
    default: {
      uint32_t u = u32(i);
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    }
  }
};
} // namespace

static void putF32(char *dst, float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  support::endian::write32le(dst, u);
}

/// Per head of `rows / heads` rows of `rowBytes` bytes: row 2i <- row i,
/// row 2i+1 <- row i + hd/2 (the same reordering as Materialize.cpp's
/// ropeHalfToAdjacent, applied to repacked rows: every part of Kiln's layout
/// has one row per output feature).
static Error permuteRows(const WeightDesc &w, int64_t heads, int64_t rows,
                         MutableArrayRef<char> data) {
  if (heads <= 0 || rows % heads != 0 || (rows / heads) % 2 != 0)
    return makeError("weight '" + w.name + "': RopeHalfToAdjacent with " +
                     Twine(heads) + " heads does not fit " + Twine(rows) +
                     " rows");
  size_t rowBytes = data.size() / rows, headDim = rows / heads,
         half = headDim / 2;
  std::vector<char> tmp(headDim * rowBytes);
  for (int64_t h = 0; h < heads; ++h) {
    char *head = data.data() + h * headDim * rowBytes;
    std::memcpy(tmp.data(), head, tmp.size());
    for (size_t i = 0; i < half; ++i) {
      std::memcpy(head + 2 * i * rowBytes, tmp.data() + i * rowBytes, rowBytes);
      std::memcpy(head + (2 * i + 1) * rowBytes,
                  tmp.data() + (i + half) * rowBytes, rowBytes);
    }
  }
  return Error::success();
}

Error materializeRepacked(const WeightDesc &w, std::vector<char> &out) {
  Expected<RepackedLayout> layout = repackedLayout(w);
  if (!layout)
    return layout.takeError();
  const WeightTransform &r = *repackStep(w);
  const TensorSource &s = w.source;
  Packed src{w, {}};
  std::optional<uint64_t> numel = numElements(s.shape);
  std::optional<uint64_t> expected =
      numel ? storageBytes(s.storage, *numel) : std::nullopt;
  if (!expected || *expected != s.bytes)
    return src.error(Twine(s.bytes) + " stored bytes at offset " +
                     Twine(s.offset) + " do not hold a " +
                     stringifyStorageType(s.storage) + " " +
                     formatShape(s.shape) + " tensor");
  src.raw.assign(s.bytes, '\0');
  if (Error e =
          readFileRange(s.file, s.offset, src.raw, "tensor '" + s.tensor + "'"))
    return e;

  const int64_t rows = r.rows, cols = r.cols, gs = r.groupSize;
  const int64_t groups = gs ? divideCeilSigned(cols, gs) : 0;
  using P = WeightTransform::QuantPart;
  if (r.part == P::Blocks) {
    // GGML blocks kept as stored: rows of raw blocks, byte for byte.
    if (ArrayRef<int64_t>(s.shape) != ArrayRef<int64_t>{rows, cols})
      return src.error("shape " + formatShape(s.shape) + " but the recipe "
                       "keeps a " + Twine(rows) + " x " + Twine(cols) +
                       " weight");
    if (src.raw.size() != layout->bytes)
      return src.error(Twine(src.raw.size()) + " stored bytes, expected " +
                       Twine(layout->bytes));
    // Every decoded weight must be finite (f16 scales of inf / NaN would
    // make the kernels' outputs NaN at run time).
    const int64_t format = *blockFormatOf(s.storage);
    const int64_t elems = kiln_block_elems(format),
                  blockBytes = kiln_block_bytes(format);
    const int64_t perRow = cols / elems;
    float decoded[256];
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t b = 0; b < perRow; ++b) {
        kiln_block_decode(format,
                          reinterpret_cast<const uint8_t *>(src.raw.data()) +
                              (o * perRow + b) * blockBytes,
                          decoded);
        for (int64_t j = 0; j < elems; ++j)
          if (!std::isfinite(decoded[j]))
            return src.error("row " + Twine(o) + ", block " + Twine(b) +
                             " (the block starts at file offset " +
                             Twine(s.offset + (o * perRow + b) * blockBytes) +
                             ") decodes to a non-finite weight (a " +
                             r.format + " scale is infinite or NaN)");
      }
    out.assign(src.raw.begin(), src.raw.end());
    for (const WeightTransform &t : ArrayRef(w.transforms).drop_front())
      if (t.kind != WeightTransform::Kind::RopeHalfToAdjacent)
        return src.error("only row reorderings can follow a repack step");
      else if (Error e = permuteRows(w, t.heads, rows, out))
        return e;
    return Error::success();
  }
  out.assign(layout->bytes, 0);
  auto checkShape = [&](ArrayRef<int64_t> want) -> Error {
    if (ArrayRef<int64_t>(s.shape) != want)
      return src.error("shape " + formatShape(s.shape) + " but the " +
                       r.format + " layout of a " + Twine(rows) + " x " +
                       Twine(cols) + " weight needs " + formatShape(want));
    return Error::success();
  };
  auto finite = [&](float v, int64_t g, int64_t o) -> Error {
    if (std::isfinite(v))
      return Error::success();
    return src.error("scale of output " + Twine(o) + ", group " + Twine(g) +
                     " is " + (std::isnan(v) ? "NaN" : "infinite") +
                     " (a quantized checkpoint needs finite scales)");
  };

  if (r.format == "gptq" || r.format == "gptq_v2" || r.format == "awq") {
    bool gptq = r.format != "awq";
    // AWQ nibble position of column 8c + k (inverse of AutoAWQ's pack
    // order [0, 2, 4, 6, 1, 3, 5, 7]).
    static const int kAwqPos[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    switch (r.part) {
    case P::QWeight: {
      int64_t packedCols = divideCeilSigned(cols, int64_t(2));
      if (gptq) {
        // int32 [in/8, out], LSB first along in: the four little-endian bytes
        // of word (j, o) are bytes 4j..4j+3 of Kiln's row o.
        if (Error e = checkShape({cols / 8, rows}))
          return e;
        for (int64_t j = 0; j < cols / 8; ++j)
          for (int64_t o = 0; o < rows; ++o)
            std::memcpy(out.data() + o * packedCols + 4 * j,
                        src.raw.data() + 4 * (j * rows + o), 4);
      } else {
        if (Error e = checkShape({cols, rows / 8}))
          return e;
        for (int64_t i = 0; i < cols; ++i)
          for (int64_t c = 0; c < rows / 8; ++c) {
            uint32_t word = src.u32(i * (rows / 8) + c);
            for (int k = 0; k < 8; ++k) {
              uint8_t q = (word >> (4 * kAwqPos[k])) & 15;
              out[(8 * c + k) * packedCols + i / 2] |=
                  static_cast<char>(q << (4 * (i % 2)));
            }
          }
      }
      break;
    }
    case P::Zeros: {
      if (Error e = checkShape({groups, rows / 8}))
        return e;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t c = 0; c < rows / 8; ++c) {
          uint32_t word = src.u32(g * (rows / 8) + c);
          for (int k = 0; k < 8; ++k) {
            int64_t o = 8 * c + k;
            int zero = (word >> (4 * (gptq ? k : kAwqPos[k]))) & 15;
            if (r.format == "gptq") {
              // checkpoint_format "gptq" (v1) stores zero - 1; a zero point
              // of 0 wrapped to nibble 15, which v1 kernels read as 16.
              if (zero == 15)
                return src.error(
                    "zero point of output " + Twine(o) + ", group " + Twine(g) +
                    " is stored as 15, i.e. 16 in checkpoint_format gptq "
                    "(v1 stores zero - 1, so a zero point of 0 wrapped "
                    "around); Kiln's 4-bit zero points are 0..15");
              ++zero;
            }
            out[o * groups + g] = static_cast<char>(zero);
          }
        }
      break;
    }
    case P::Scales: {
      if (Error e = checkShape({groups, rows}))
        return e;
      for (int64_t g = 0; g < groups; ++g)
        for (int64_t o = 0; o < rows; ++o) {
          float v = src.scale(g * rows + o);
          if (Error e = finite(v, g, o))
            return e;
          putF32(out.data() + 4 * (o * groups + g), v);
        }
      break;
    }
    case P::Blocks:
      break; // handled above
    }
  } else if (r.format == "q4_0" || r.format == "q8_0") {
    bool four = r.format == "q4_0";
    size_t blockBytes = four ? 18 : 34;
    if (Error e = checkShape({rows, cols}))
      return e;
    if (gs != 32 || cols % 32 != 0)
      return src.error("GGUF " + r.format +
                       " blocks hold 32 weights of a "
                       "row, but the row length is " +
                       Twine(cols) + " and the group size " + Twine(gs));
    for (int64_t o = 0; o < rows; ++o)
      for (int64_t b = 0; b < groups; ++b) {
        const char *blk = src.raw.data() + (o * groups + b) * blockBytes;
        switch (r.part) {
        case P::Scales: {
          float d = halfToFloat(support::endian::read16le(blk));
          if (Error e = finite(d, b, o))
            return e;
          putF32(out.data() + 4 * (o * groups + b), d);
          break;
        }
        case P::Zeros:
          out[o * groups + b] = 8;
          break;
        case P::QWeight:
          if (four) {
            // Block element j is byte j's low nibble (j < 16) or byte
            // j - 16's high nibble; Kiln byte k holds elements 2k, 2k + 1.
            char *dst = out.data() + o * (cols / 2) + b * 16;
            auto elem = [&](int j) {
              uint8_t byte = static_cast<uint8_t>(blk[2 + (j & 15)]);
              return j < 16 ? byte & 15 : byte >> 4;
            };
            for (int k = 0; k < 16; ++k)
              dst[k] = static_cast<char>(elem(2 * k) | (elem(2 * k + 1) << 4));
          } else {
            std::memcpy(out.data() + o * cols + b * 32, blk + 2, 32);
          }
          break;
        case P::Blocks:
          break; // handled above
        }
      }
  } else {
    return src.error("unknown repack format '" + r.format + "'");
  }

  for (const WeightTransform &t : ArrayRef(w.transforms).drop_front()) {
    if (t.kind != WeightTransform::Kind::RopeHalfToAdjacent)
      return makeError("weight '" + w.name +
                       "': only row reorderings can follow a repack step");
    if (Error e = permuteRows(w, t.heads, rows, out))
      return e;
  }
  return Error::success();
}

} // namespace mlir::kiln
