//===- GgufImporter.cpp - GGUF (llama.cpp) importer -----------------------===//
//
// GGUF v2/v3 (llama.cpp docs/gguf.md): "GGUF", uint32 version, uint64
// tensor_count, uint64 kv_count, the KV pairs, the tensor infos (name, n_dims,
// ne[n_dims] with ne0 the fastest-varying dim, ggml type, offset relative to
// the data section), then the data section at the next multiple of
// `general.alignment` (default 32). All little-endian.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "kiln_rt/block_formats.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cfloat>
#include <cmath>
#include <cstring>

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

namespace {
enum GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

struct GgufValue {
  uint32_t type = 0;
  uint64_t offset = 0; ///< file offset of the value
  int64_t i = 0;       ///< integer and bool scalars (uint64 above 2^63 wrap)
  double f = 0.0;      ///< float scalars
  std::string s;       ///< string scalars
  uint32_t elemType = 0;
  uint64_t count = 0;
  std::vector<std::string> strs; ///< string arrays
  std::vector<double> nums;      ///< numeric / bool arrays

  bool isInteger() const {
    return type <= kI32 || type == kBool || type == kU64 || type == kI64;
  }
  bool isFloat() const { return type == kF32 || type == kF64; }
};

struct GgufTensor {
  std::string name;
  SmallVector<uint64_t, 4> ne;
  uint32_t type = 0;
  uint64_t offset = 0;     ///< relative to the data section
  uint64_t infoOffset = 0; ///< where the tensor info starts
};

struct GgufFile {
  std::string path;
  uint64_t fileSize = 0;
  uint32_t version = 0;
  StringMap<GgufValue> kvs;
  std::vector<GgufTensor> tensors;
  StringMap<size_t> tensorIndex;
  uint64_t alignment = 32; ///< general.alignment
  uint64_t dataOffset = 0;
  std::unique_ptr<MemoryBuffer> buffer;
};
} // namespace

static StringRef valueTypeName(uint32_t t) {
  static const char *const names[] = {"uint8",  "int8",   "uint16", "int16",
                                      "uint32", "int32",  "float32", "bool",
                                      "string", "array",  "uint64", "int64",
                                      "float64"};
  return t <= kF64 ? names[t] : "unknown";
}

static StringRef ggmlTypeName(uint32_t t) {
  switch (t) {
  case 0: return "F32";
  case 1: return "F16";
  case 2: return "Q4_0";
  case 3: return "Q4_1";
  case 6: return "Q5_0";
  case 7: return "Q5_1";
  case 8: return "Q8_0";
  case 9: return "Q8_1";
  case 10: return "Q2_K";
  case 11: return "Q3_K";
  case 12: return "Q4_K";
  case 13: return "Q5_K";
  case 14: return "Q6_K";
  case 15: return "Q8_K";
  case 16: return "IQ2_XXS";
  case 17: return "IQ2_XS";
  case 18: return "IQ3_XXS";
  case 19: return "IQ1_S";
  case 20: return "IQ4_NL";
  case 21: return "IQ3_S";
  case 22: return "IQ2_S";
  case 23: return "IQ4_XS";
  case 24: return "I8";
  case 25: return "I16";
  case 26: return "I32";
  case 27: return "I64";
  case 28: return "F64";
  case 29: return "IQ1_M";
  case 30: return "BF16";
  case 34: return "TQ1_0";
  case 35: return "TQ2_0";
  case 39: return "MXFP4";
  default: return "unknown";
  }
}

/// ggml block size (elements) and bytes per block of a tensor type, as in
/// ggml's type_traits / gguf-py GGML_QUANT_SIZES; std::nullopt if unknown.
static std::optional<std::pair<uint64_t, uint64_t>> ggmlBlock(uint32_t t) {
  using P = std::pair<uint64_t, uint64_t>;
  // clang-format off
  switch (t) {
  case 0: return P{1, 4};     // F32
  case 1: return P{1, 2};     // F16
  case 2: return P{32, 18};   // Q4_0
  case 3: return P{32, 20};   // Q4_1
  case 6: return P{32, 22};   // Q5_0
  case 7: return P{32, 24};   // Q5_1
  case 8: return P{32, 34};   // Q8_0
  case 9: return P{32, 36};   // Q8_1
  case 10: return P{256, 84}; // Q2_K
  case 11: return P{256, 110}; // Q3_K
  case 12: return P{256, 144}; // Q4_K
  case 13: return P{256, 176}; // Q5_K
  case 14: return P{256, 210}; // Q6_K
  case 15: return P{256, 292}; // Q8_K
  case 16: return P{256, 66};  // IQ2_XXS
  case 17: return P{256, 74};  // IQ2_XS
  case 18: return P{256, 98};  // IQ3_XXS
  case 19: return P{256, 50};  // IQ1_S
  case 20: return P{32, 18};   // IQ4_NL
  case 21: return P{256, 110}; // IQ3_S
  case 22: return P{256, 82};  // IQ2_S
  case 23: return P{256, 136}; // IQ4_XS
  case 24: return P{1, 1};     // I8
  case 25: return P{1, 2};     // I16
  case 26: return P{1, 4};     // I32
  case 27: return P{1, 8};     // I64
  case 28: return P{1, 8};     // F64
  case 29: return P{256, 56};  // IQ1_M
  case 30: return P{1, 2};     // BF16
  case 34: return P{256, 54};  // TQ1_0
  case 35: return P{256, 66};  // TQ2_0
  case 39: return P{32, 17};   // MXFP4
  default: return std::nullopt;
  }
  // clang-format on
}

/// Smallest encoding of one value of `type`, to bound counts read from the
/// file by the bytes that remain.
static uint64_t minValueBytes(uint32_t type) {
  switch (type) {
  case kU8: case kI8: case kBool: return 1;
  case kU16: case kI16: return 2;
  case kU32: case kI32: case kF32: return 4;
  case kU64: case kI64: case kF64: return 8;
  case kString: return 8;
  case kArray: return 12;
  default: return 1;
  }
}

static Error readString(ByteReader &r, std::string &out, const Twine &what) {
  uint64_t len;
  uint64_t at = r.offset();
  if (Error e = r.readU64(len, what + " length"))
    return e;
  if (len > r.remaining())
    return fileError(r.fileName(), what + " at offset " + Twine(at) +
                                       " has length " + Twine(len) +
                                       " but only " + Twine(r.remaining()) +
                                       " bytes remain in the file");
  StringRef bytes;
  if (Error e = r.readBytes(len, bytes, what))
    return e;
  out = bytes.str();
  return Error::success();
}

/// Reads a key or tensor name, which the GGUF spec makes printable ASCII
/// (names are echoed in messages: raw bytes would put control sequences and
/// megabytes of binary on the user's terminal). Names are at most 65535
/// bytes (GGUF spec: "key ... at most 2^16-1 bytes"; tensor names 64).
static Error readName(ByteReader &r, std::string &out, const Twine &what) {
  uint64_t at = r.offset();
  if (Error e = readString(r, out, what))
    return e;
  auto bad = llvm::find_if(out, [](char c) {
    return static_cast<unsigned char>(c) < 0x20 ||
           static_cast<unsigned char>(c) > 0x7e;
  });
  if (out.size() > 65535 || bad != out.end()) {
    std::string shown;
    llvm::raw_string_ostream os(shown);
    llvm::printEscapedString(StringRef(out).take_front(48), os);
    return fileError(r.fileName(),
                     what + " at offset " + Twine(at) + " is " +
                         (bad != out.end() ? "not printable ASCII"
                                           : "longer than 65535 bytes") +
                         " (\"" + shown + (out.size() > 48 ? "..." : "") +
                         "\"): a corrupted GGUF header");
  }
  return Error::success();
}

/// Reads one scalar of `type` into v.i / v.f / v.s.
static Error readScalar(ByteReader &r, uint32_t type, GgufValue &v,
                        const Twine &what) {
  switch (type) {
  case kU8: case kBool: {
    uint8_t x;
    if (Error e = r.readU8(x, what))
      return e;
    v.i = x;
    return Error::success();
  }
  case kI8: {
    uint8_t x;
    if (Error e = r.readU8(x, what))
      return e;
    v.i = static_cast<int8_t>(x);
    return Error::success();
  }
  case kU16: case kI16: {
    uint16_t x;
    if (Error e = r.readU16(x, what))
      return e;
    v.i = type == kU16 ? int64_t(x) : int64_t(static_cast<int16_t>(x));
    return Error::success();
  }
  case kU32: case kI32: {
    uint32_t x;
    if (Error e = r.readU32(x, what))
      return e;
    v.i = type == kU32 ? int64_t(x) : int64_t(static_cast<int32_t>(x));
    return Error::success();
  }
  case kU64: case kI64: {
    uint64_t x;
    if (Error e = r.readU64(x, what))
      return e;
    v.i = static_cast<int64_t>(x);
    return Error::success();
  }
  case kF32: {
    float x;
    if (Error e = r.readF32(x, what))
      return e;
    v.f = x;
    return Error::success();
  }
  case kF64:
    return r.readF64(v.f, what);
  case kString:
    return readString(r, v.s, what);
  default:
    return r.error(what + ": unknown value type " + Twine(type));
  }
}

static Error readValue(ByteReader &r, uint32_t type, GgufValue &v,
                       const Twine &what, int depth) {
  v.type = type;
  v.offset = r.offset();
  if (type != kArray)
    return readScalar(r, type, v, what);
  if (depth > 2)
    return r.error(what + ": arrays nested too deeply");
  if (Error e = r.readU32(v.elemType, what + " element type"))
    return e;
  if (v.elemType > kF64)
    return r.error(what + ": unknown array element type " +
                   Twine(v.elemType));
  uint64_t countAt = r.offset();
  if (Error e = r.readU64(v.count, what + " element count"))
    return e;
  if (v.count > r.remaining() / minValueBytes(v.elemType))
    return fileError(r.fileName(),
                     what + ": array of " + Twine(v.count) + " " +
                         valueTypeName(v.elemType) + " at offset " +
                         Twine(countAt) + " cannot fit in the " +
                         Twine(r.remaining()) + " bytes that remain");
  if (v.elemType == kString)
    v.strs.reserve(v.count);
  else if (v.elemType != kArray)
    v.nums.reserve(v.count);
  GgufValue elem; // reused: one value per element was most of the cost
  for (uint64_t k = 0; k < v.count; ++k) {
    if (v.elemType == kArray) {
      elem.strs.clear();
      elem.nums.clear();
      if (Error e = readValue(r, kArray, elem, what + "[" + Twine(k) + "]",
                              depth + 1))
        return e;
      continue; // Nested arrays are validated but not kept.
    }
    if (Error e = readScalar(r, v.elemType, elem, what + "[" + Twine(k) + "]"))
      return e;
    if (v.elemType == kString)
      v.strs.push_back(std::move(elem.s));
    else if (v.elemType == kF32 || v.elemType == kF64)
      v.nums.push_back(elem.f);
    else
      v.nums.push_back(static_cast<double>(elem.i));
  }
  return Error::success();
}

static Expected<GgufFile> parseGguf(StringRef path) {
  GgufFile g;
  g.path = path.str();
  // A regular file (never a FIFO or device), memory-mapped.
  Expected<std::unique_ptr<MemoryBuffer>> buf =
      readRegularFile(path, UINT64_MAX, "a GGUF file");
  if (!buf)
    return buf.takeError();
  g.buffer = std::move(*buf);
  g.fileSize = g.buffer->getBufferSize();
  ByteReader r(path, g.buffer->getBuffer());

  StringRef magic;
  if (g.fileSize < 4)
    return fileError(path, "file is " + Twine(g.fileSize) +
                               " bytes, too small for a GGUF header");
  if (Error e = r.readBytes(4, magic, "magic"))
    return std::move(e);
  if (magic != "GGUF") {
    std::string hex;
    raw_string_ostream os(hex);
    for (size_t i = 0; i < magic.size(); ++i)
      os << (i ? " " : "")
         << format_hex_no_prefix(static_cast<uint8_t>(magic[i]), 2);
    return fileError(path, "bad magic " + hex +
                               " at offset 0 (expected 'GGUF' = 47 47 55 46)");
  }
  if (Error e = r.readU32(g.version, "version"))
    return std::move(e);
  if (g.version == 0x03000000u || g.version == 0x02000000u)
    return fileError(path, "big-endian GGUF files are not supported");
  if (g.version != 2 && g.version != 3)
    return fileError(path, "unsupported GGUF version " + Twine(g.version) +
                               " at offset 4, expected 2 or 3");
  uint64_t tensorCount, kvCount;
  if (Error e = r.readU64(tensorCount, "tensor_count"))
    return std::move(e);
  if (Error e = r.readU64(kvCount, "kv_count"))
    return std::move(e);
  // Each KV takes at least 8 (key length) + 4 (type) + 1 bytes, each tensor
  // info at least 8 + 4 + 8 + 4 + 8.
  if (kvCount > r.remaining() / 13)
    return fileError(path, "kv_count " + Twine(kvCount) +
                               " at offset 16 cannot fit in the " +
                               Twine(r.remaining()) + " bytes that remain");
  if (tensorCount > r.remaining() / 32)
    return fileError(path, "tensor_count " + Twine(tensorCount) +
                               " at offset 8 cannot fit in the " +
                               Twine(r.remaining()) + " bytes that remain");

  for (uint64_t k = 0; k < kvCount; ++k) {
    std::string key;
    if (Error e = readName(r, key, "key of KV pair " + Twine(k)))
      return std::move(e);
    uint32_t type;
    if (Error e = r.readU32(type, "type of key '" + key + "'"))
      return std::move(e);
    if (type > kF64)
      return fileError(path, "key '" + key + "' has unknown value type " +
                                 Twine(type) + " at offset " +
                                 Twine(r.offset() - 4));
    GgufValue v;
    if (Error e = readValue(r, type, v, "value of key '" + key + "'", 0))
      return std::move(e);
    // llama.cpp refuses a key that appears twice; taking either value
    // would silently change the model (e.g. a second eos_token_id).
    if (g.kvs.count(key))
      return fileError(path, "duplicate key '" + key + "' (KV pair " +
                                 Twine(k) + " at offset " +
                                 Twine(v.offset) +
                                 "): a GGUF names each key once");
    g.kvs[key] = std::move(v);
  }

  g.tensors.reserve(tensorCount);
  for (uint64_t k = 0; k < tensorCount; ++k) {
    GgufTensor t;
    t.infoOffset = r.offset();
    if (Error e = readName(r, t.name, "name of tensor " + Twine(k)))
      return std::move(e);
    uint32_t nDims;
    if (Error e = r.readU32(nDims, "n_dims of tensor '" + t.name + "'"))
      return std::move(e);
    if (nDims == 0 || nDims > 4)
      return fileError(path, "tensor '" + t.name + "' has n_dims " +
                                 Twine(nDims) + " at offset " +
                                 Twine(r.offset() - 4) +
                                 ", expected 1 to 4");
    for (uint32_t d = 0; d < nDims; ++d) {
      uint64_t n;
      if (Error e = r.readU64(n, "ne[" + Twine(d) + "] of tensor '" +
                                     t.name + "'"))
        return std::move(e);
      if (n == 0 || n > (uint64_t(1) << 40))
        return fileError(path, "tensor '" + t.name + "' has ne[" + Twine(d) +
                                   "] = " + Twine(n) + " at offset " +
                                   Twine(r.offset() - 8) +
                                   ", expected 1 to 2^40");
      t.ne.push_back(n);
    }
    if (Error e = r.readU32(t.type, "type of tensor '" + t.name + "'"))
      return std::move(e);
    if (Error e = r.readU64(t.offset, "offset of tensor '" + t.name + "'"))
      return std::move(e);
    if (!g.tensorIndex.try_emplace(t.name, g.tensors.size()).second)
      return fileError(path, "duplicate tensor name '" + t.name +
                                 "' at offset " + Twine(t.infoOffset));
    g.tensors.push_back(std::move(t));
  }

  auto it = g.kvs.find("general.alignment");
  if (it != g.kvs.end()) {
    const GgufValue &v = it->second;
    if (!v.isInteger())
      return fileError(path, "key 'general.alignment' at offset " +
                                 Twine(v.offset) + " has type " +
                                 valueTypeName(v.type) +
                                 ", expected an integer (uint32)");
    if (v.i <= 0 || !isPowerOf2_64(v.i) || v.i > (1 << 20))
      return fileError(path, "general.alignment is " + Twine(v.i) +
                                 " at offset " + Twine(v.offset) +
                                 ", expected a non-zero power of two <= 2^20 "
                                 "(default 32)");
    g.alignment = v.i;
  }
  // Every tensor's data must start on an alignment boundary.
  for (const GgufTensor &t : g.tensors)
    if (t.offset % g.alignment != 0)
      return fileError(
          path, "tensor '" + t.name + "': data offset " + Twine(t.offset) +
                    " is not a multiple of the alignment " +
                    Twine(g.alignment) + " (tensor info at offset " +
                    Twine(t.infoOffset) + ")");
  g.dataOffset = alignTo(r.offset(), g.alignment);
  if (g.dataOffset > g.fileSize)
    return fileError(path, "data section at offset " + Twine(g.dataOffset) +
                               " is past the end of the file (" +
                               Twine(g.fileSize) + " bytes)");
  return g;
}

//===----------------------------------------------------------------------===//
// Typed key access
//===----------------------------------------------------------------------===//

static const GgufValue *findKey(const GgufFile &g, StringRef key) {
  auto it = g.kvs.find(key);
  return it == g.kvs.end() ? nullptr : &it->second;
}

static Error wrongType(const GgufFile &g, StringRef key, const GgufValue &v,
                       StringRef expected) {
  return fileError(g.path, "key '" + key + "' at offset " + Twine(v.offset) +
                               " has type " + valueTypeName(v.type) +
                               ", expected " + expected);
}

static Expected<std::optional<int64_t>> getInt(const GgufFile &g,
                                               StringRef key) {
  const GgufValue *v = findKey(g, key);
  if (!v)
    return std::nullopt;
  if (!v->isInteger())
    return wrongType(g, key, *v, "an integer");
  return v->i;
}

static Expected<std::optional<double>> getFloat(const GgufFile &g,
                                                StringRef key) {
  const GgufValue *v = findKey(g, key);
  if (!v)
    return std::nullopt;
  if (v->isFloat())
    return v->f;
  if (v->isInteger())
    return static_cast<double>(v->i);
  return wrongType(g, key, *v, "a number");
}

static Expected<std::optional<std::string>> getString(const GgufFile &g,
                                                      StringRef key) {
  const GgufValue *v = findKey(g, key);
  if (!v)
    return std::nullopt;
  if (v->type != kString)
    return wrongType(g, key, *v, "a string");
  return v->s;
}

static Expected<int64_t> getRequiredInt(const GgufFile &g, StringRef key) {
  Expected<std::optional<int64_t>> v = getInt(g, key);
  if (!v)
    return v.takeError();
  if (!*v)
    return fileError(g.path, "missing key '" + key + "'");
  return **v;
}

//===----------------------------------------------------------------------===//
// Tokenizer
//===----------------------------------------------------------------------===//

/// The rest of a `tokenizer.ggml.model = gpt2` vocabulary (llama.cpp's
/// LLAMA_VOCAB_TYPE_BPE): merges, the pre-tokenizer named by
/// `tokenizer.ggml.pre`, special ids and flags with llama.cpp's defaults for
/// that model (BOS/EOS 11, no unknown piece, no BOS unless the Llama 3
/// pre-tokenizer or `add_bos_token` asks). `tok` holds the pieces and types.
static Expected<TokenizerDesc> byteLevelTokenizerFromGguf(const GgufFile &g,
                                                          TokenizerDesc tok) {
  size_t n = tok.pieces.size();
  const GgufValue *merges = findKey(g, "tokenizer.ggml.merges");
  if (!merges)
    return fileError(g.path, "missing key 'tokenizer.ggml.merges' (a "
                             "'gpt2' byte-level BPE vocabulary needs its "
                             "merges)");
  if (merges->type != kArray || merges->elemType != kString)
    return fileError(g.path, "key 'tokenizer.ggml.merges' at offset " +
                                 Twine(merges->offset) +
                                 " is not an array of strings");
  if (merges->strs.empty())
    return fileError(g.path, "key 'tokenizer.ggml.merges' at offset " +
                                 Twine(merges->offset) +
                                 " is an empty array (a 'gpt2' byte-level BPE "
                                 "vocabulary needs its merges; without them "
                                 "every text would be split into bytes)");
  StringSet<> known;
  for (const std::string &p : tok.pieces)
    known.insert(p);
  tok.merges.reserve(merges->strs.size());
  for (auto [rank, m] : llvm::enumerate(merges->strs)) {
    auto where = [&, rank = rank, &m = m] {
      return "key 'tokenizer.ggml.merges' at offset " +
             std::to_string(merges->offset) + ": merge " +
             std::to_string(rank) + " " + quotePiece(m);
    };
    auto [left, right] = StringRef(m).split(' ');
    if (left.empty() || right.empty() || right.contains(' '))
      return fileError(g.path, where() + " is not two pieces separated by "
                                         "one space");
    for (StringRef half : {left, right})
      if (!known.contains(half))
        return fileError(g.path, where() + ": piece " + quotePiece(half) +
                                     " is not in tokenizer.ggml.tokens");
    if (!known.contains((left + right).str()))
      return fileError(g.path, where() + ": merged piece " +
                                   quotePiece((left + right).str()) +
                                   " is not in tokenizer.ggml.tokens");
    tok.merges.push_back(m);
  }

  Expected<std::optional<std::string>> pre =
      getString(g, "tokenizer.ggml.pre");
  if (!pre)
    return pre.takeError();
  // llama.cpp reads a missing name as "default" (with a warning that
  // quality degrades): files written before the key existed lack it.
  tok.preTokenizer = pre->value_or("default");
  if (!*pre)
    tok.notes.push_back(
        "no 'tokenizer.ggml.pre' key: using the 'default' byte-level "
        "pre-tokenizer as llama.cpp does; token ids can differ from the "
        "model's own tokenizer (the file predates the key; a re-converted "
        "GGUF names its pre-tokenizer)");
  std::optional<std::vector<std::string>> regexes =
      ggufPreTokenizerRegexes(tok.preTokenizer);
  if (!regexes)
    return fileError(g.path, "key 'tokenizer.ggml.pre' is " +
                                 quotePiece(tok.preTokenizer) +
                                 ": unknown byte-level BPE pre-tokenizer "
                                 "(Kiln implements 'smollm', 'llama-bpe', "
                                 "'qwen2', 'gpt2' and 'default')");
  tok.preTokenizerRegexes = std::move(*regexes);
  bool llama3 = tok.preTokenizer == "llama-bpe" ||
                tok.preTokenizer == "llama3" || tok.preTokenizer == "llama-v3";
  tok.ignoreMerges = llama3;
  // Qwen2's tokenizer.json normalises to NFC, which the GGUF does not record
  // (llama.cpp skips it); Kiln follows Hugging Face.
  if (tok.preTokenizer == "qwen2")
    tok.normalizer = "nfc";

  auto intKey = [&](StringRef key, int64_t dflt) -> Expected<int64_t> {
    Expected<std::optional<int64_t>> v = getInt(g, key);
    if (!v)
      return v.takeError();
    return v->value_or(dflt);
  };
  Expected<int64_t> bos = intKey("tokenizer.ggml.bos_token_id", 11);
  Expected<int64_t> eos = intKey("tokenizer.ggml.eos_token_id", 11);
  Expected<int64_t> unk = intKey("tokenizer.ggml.unknown_token_id", -1);
  Expected<int64_t> addBos = intKey("tokenizer.ggml.add_bos_token", llama3);
  Expected<int64_t> addEos = intKey("tokenizer.ggml.add_eos_token", 0);
  Expected<int64_t> addSpace = intKey("tokenizer.ggml.add_space_prefix", 0);
  Expected<int64_t> pad = intKey("tokenizer.ggml.padding_token_id", -1);
  for (Expected<int64_t> *v : {&bos, &eos, &unk, &addBos, &addEos, &addSpace,
                               &pad})
    if (!*v)
      return v->takeError();
  if (*addSpace)
    return fileError(g.path, "tokenizer.ggml.add_space_prefix is true for a "
                             "byte-level BPE vocabulary, which is not "
                             "implemented");
  for (auto [key, id] :
       {std::pair<const char *, int64_t>{"tokenizer.ggml.bos_token_id", *bos},
        {"tokenizer.ggml.eos_token_id", *eos},
        {"tokenizer.ggml.unknown_token_id", *unk},
        {"tokenizer.ggml.padding_token_id", *pad}})
    if (id != -1 && id != UINT32_MAX &&
        (id < 0 || static_cast<uint64_t>(id) >= n))
      return fileError(g.path, Twine(key) + " " + Twine(id) +
                                   " is out of range for a vocabulary of " +
                                   Twine(n) + " pieces");
  auto clampId = [](int64_t id) {
    return id < 0 || id > INT32_MAX ? int32_t(-1) : static_cast<int32_t>(id);
  };
  tok.bosId = clampId(*bos);
  tok.eosId = clampId(*eos);
  tok.unkId = clampId(*unk);
  if (tok.bosId < 0 || tok.eosId < 0)
    return fileError(g.path, Twine(tok.bosId < 0 ? "tokenizer.ggml.bos_token_id"
                                                 : "tokenizer.ggml.eos_token_id") +
                                 " is " +
                                 Twine(tok.bosId < 0 ? *bos : *eos) +
                                 ", which names no piece (Kiln needs both a "
                                 "BOS and an EOS piece)");
  tok.addBos = *addBos != 0;
  tok.addEos = *addEos != 0;
  tok.addDummyPrefix = false;
  tok.byteFallback = false;
  if (Error e = checkTokenizer(tok, g.path))
    return std::move(e);
  return tok;
}

static Expected<TokenizerDesc> tokenizerFromGguf(const GgufFile &g) {
  TokenizerDesc tok;
  const GgufValue *tokens = findKey(g, "tokenizer.ggml.tokens");
  Expected<std::optional<std::string>> model =
      getString(g, "tokenizer.ggml.model");
  if (!model)
    return model.takeError();
  if (!tokens)
    return tok; // No vocabulary in this file.
  std::string modelName = model->value_or("llama");
  if (modelName != "llama" && modelName != "gpt2")
    return fileError(g.path, "unsupported tokenizer.ggml.model '" + modelName +
                                 "' (expected 'llama', SentencePiece, or "
                                 "'gpt2', byte-level BPE)");
  bool byteLevel = modelName == "gpt2";
  if (tokens->type != kArray || tokens->elemType != kString)
    return fileError(g.path, "key 'tokenizer.ggml.tokens' at offset " +
                                 Twine(tokens->offset) +
                                 " is not an array of strings");
  size_t n = tokens->strs.size();
  tok.model = byteLevel ? "byte_bpe" : "spm";
  tok.pieces = tokens->strs;
  tok.scores.assign(n, 0.0f);
  tok.types.assign(n, 1);
  if (const GgufValue *scores = findKey(g, "tokenizer.ggml.scores")) {
    if (scores->type != kArray || scores->nums.size() != n)
      return fileError(g.path, "key 'tokenizer.ggml.scores' at offset " +
                                   Twine(scores->offset) + " must be an array "
                                   "of " + Twine(n) + " numbers (one per "
                                   "token)");
    for (size_t i = 0; i < n; ++i) {
      double d = scores->nums[i];
      if (!std::isfinite(d) || std::fabs(d) > FLT_MAX)
        return fileError(g.path, "key 'tokenizer.ggml.scores' at offset " +
                                     Twine(scores->offset) + ": token " +
                                     Twine(i) + " has score " +
                                     (std::isnan(d) ? "nan" : "inf") +
                                     ", expected a finite number");
      tok.scores[i] = static_cast<float>(d);
    }
  }
  if (const GgufValue *types = findKey(g, "tokenizer.ggml.token_type")) {
    if (types->type != kArray || types->nums.size() != n)
      return fileError(g.path, "key 'tokenizer.ggml.token_type' at offset " +
                                   Twine(types->offset) + " must be an array "
                                   "of " + Twine(n) + " integers (one per "
                                   "token)");
    for (size_t i = 0; i < n; ++i) {
      double t = types->nums[i];
      if (!(t >= 1 && t <= 6) || t != std::floor(t)) {
        std::string shown;
        raw_string_ostream(shown) << format("%g", t);
        return fileError(g.path, "key 'tokenizer.ggml.token_type' at "
                                 "offset " +
                                     Twine(types->offset) + ": token " +
                                     Twine(i) + " has type " + shown +
                                     ", expected 1 (normal), 2 (unknown), "
                                     "3 (control), 4 (user-defined), 5 "
                                     "(unused) or 6 (byte)");
      }
      tok.types[i] = static_cast<int32_t>(t);
    }
  } else if (!byteLevel) {
    for (size_t i = 0; i < n; ++i)
      if (isBytePiece(tok.pieces[i]))
        tok.types[i] = 6;
  }
  if (byteLevel)
    return byteLevelTokenizerFromGguf(g, std::move(tok));
  auto intKey = [&](StringRef key, int64_t dflt) -> Expected<int64_t> {
    Expected<std::optional<int64_t>> v = getInt(g, key);
    if (!v)
      return v.takeError();
    return v->value_or(dflt);
  };
  Expected<int64_t> bos = intKey("tokenizer.ggml.bos_token_id", 1);
  Expected<int64_t> eos = intKey("tokenizer.ggml.eos_token_id", 2);
  Expected<int64_t> unk = intKey("tokenizer.ggml.unknown_token_id", 0);
  Expected<int64_t> addBos = intKey("tokenizer.ggml.add_bos_token", 1);
  Expected<int64_t> addSpace = intKey("tokenizer.ggml.add_space_prefix", 1);
  Expected<int64_t> addEos = intKey("tokenizer.ggml.add_eos_token", 0);
  Expected<int64_t> removeSpaces =
      intKey("tokenizer.ggml.remove_extra_whitespaces", 0);
  Expected<int64_t> pad = intKey("tokenizer.ggml.padding_token_id", -1);
  for (Expected<int64_t> *v :
       {&bos, &eos, &unk, &addBos, &addSpace, &addEos, &removeSpaces, &pad})
    if (!*v)
      return v->takeError();
  // Keys whose non-default values change encoding in ways Kiln does not
  // implement.
  if (*addEos)
    return fileError(g.path, "tokenizer.ggml.add_eos_token is true: "
                             "appending EOS to prompts is not implemented");
  if (*removeSpaces)
    return fileError(g.path, "tokenizer.ggml.remove_extra_whitespaces is "
                             "true, which is not implemented");
  if (const GgufValue *cm = findKey(g, "tokenizer.ggml.precompiled_charsmap");
      cm && (!cm->nums.empty() || !cm->strs.empty() || !cm->s.empty()))
    return fileError(g.path, "tokenizer.ggml.precompiled_charsmap: Unicode "
                             "normalisation is not implemented");
  // No padding token is -1, or UINT32_MAX as llama.cpp writes it.
  if (*pad != -1 && *pad != UINT32_MAX &&
      (*pad < 0 || static_cast<uint64_t>(*pad) >= n))
    return fileError(g.path, "tokenizer.ggml.padding_token_id " + Twine(*pad) +
                                 " is out of range for a vocabulary of " +
                                 Twine(n) + " pieces");
  auto clampId = [](int64_t id) {
    return id < 0 || id > INT32_MAX ? int32_t(-1) : static_cast<int32_t>(id);
  };
  tok.bosId = clampId(*bos);
  tok.eosId = clampId(*eos);
  tok.unkId = clampId(*unk);
  tok.addBos = *addBos != 0;
  tok.addDummyPrefix = *addSpace != 0;
  tok.byteFallback = true;
  if (Error e = rejectUserDefinedPieces(tok, g.path))
    return std::move(e);
  if (Error e = checkTokenizer(tok, g.path))
    return std::move(e);
  return tok;
}

Expected<TokenizerDesc> readGgufTokenizer(StringRef path) {
  Expected<GgufFile> g = parseGguf(path);
  if (!g)
    return g.takeError();
  Expected<TokenizerDesc> tok = tokenizerFromGguf(*g);
  if (!tok)
    return tok.takeError();
  if (tok->pieces.empty())
    return fileError(path, "no tokenizer.ggml.tokens key: the file has no "
                           "vocabulary");
  return tok;
}

//===----------------------------------------------------------------------===//
// Model
//===----------------------------------------------------------------------===//

namespace {
struct ResolvedTensor {
  const GgufTensor *info = nullptr;
  TensorSource source;
};
} // namespace

/// Maps a GGUF tensor to a TensorSource, checking type, shape and bounds.
static Expected<ResolvedTensor> resolveTensor(const GgufFile &g,
                                              StringRef name,
                                              ArrayRef<int64_t> expected) {
  auto it = g.tensorIndex.find(name);
  if (it == g.tensorIndex.end())
    return fileError(g.path, "missing tensor '" + name + "'");
  const GgufTensor &t = g.tensors[it->second];
  ResolvedTensor res;
  res.info = &t;
  TensorSource &s = res.source;
  s.file = g.path;
  s.tensor = t.name;
  std::optional<StorageType> storage = storageOfGgmlType(t.type);
  if (!storage)
    return fileError(
        g.path, "tensor '" + name + "' (info at offset " + Twine(t.infoOffset) +
                    ") has unsupported type " + ggmlTypeName(t.type) + " (" +
                    Twine(t.type) +
                    "); supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, "
                    "Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K");
  s.storage = *storage;
  for (uint64_t d : llvm::reverse(t.ne))
    s.shape.push_back(static_cast<int64_t>(d));
  if (Error e = checkShape(g.path, name, s.shape, expected))
    return std::move(e);
  if (std::optional<int64_t> format = blockFormatOf(s.storage);
      format && t.ne[0] % uint64_t(kiln_block_elems(*format)) != 0)
    return fileError(g.path, "tensor '" + name + "' is " +
                                 ggmlTypeName(t.type) +
                                 " but its row length ne[0] = " +
                                 Twine(t.ne[0]) + " is not a multiple of " +
                                 Twine(kiln_block_elems(*format)) +
                                 ", the format's block length");
  std::optional<uint64_t> numel = numElements(s.shape);
  std::optional<uint64_t> bytes =
      numel ? storageBytes(s.storage, *numel) : std::nullopt;
  uint64_t start, end;
  if (!bytes || addOverflow(g.dataOffset, t.offset, start) ||
      addOverflow(start, *bytes, end) || end > g.fileSize)
    return fileError(g.path, "tensor '" + name + "' at offset " +
                                 Twine(g.dataOffset) + " + " +
                                 Twine(t.offset) + " with " +
                                 Twine(bytes.value_or(0)) +
                                 " bytes extends past the end of the file (" +
                                 Twine(g.fileSize) + " bytes)");
  s.offset = start;
  s.bytes = *bytes;
  return res;
}

/// Checks the tensors' data spans [offset, offset + bytes) (relative to the
/// data section; bytes from each tensor's type and shape): each lies inside
/// the file, no two overlap, and they are packed as every GGUF writer lays
/// them out (in offset order, each padded to the alignment, the first at 0).
/// A span that does not fit the layout means a corrupted type, shape or
/// offset, e.g. an F32 tensor relabelled F16 leaves a hole after it.
/// Tensors of types unknown here are only checked not to start inside
/// another tensor.
static Error checkTensorLayout(const GgufFile &g) {
  struct Span {
    const GgufTensor *t;
    uint64_t begin;
    std::optional<uint64_t> end; ///< nullopt: unknown type
  };
  std::vector<Span> spans;
  spans.reserve(g.tensors.size());
  uint64_t dataSize = g.fileSize - g.dataOffset;
  for (const GgufTensor &t : g.tensors) {
    Span s{&t, t.offset, std::nullopt};
    if (std::optional<std::pair<uint64_t, uint64_t>> block =
            ggmlBlock(t.type)) {
      if (t.ne[0] % block->first != 0)
        return fileError(
            g.path,
            "tensor '" + t.name + "' has type " + ggmlTypeName(t.type) +
                " (blocks of " + Twine(block->first) +
                " elements) but its row length ne[0] = " + Twine(t.ne[0]) +
                " is not a multiple of " + Twine(block->first));
      uint64_t rows = 1, bytes, end;
      bool overflow = false;
      for (uint64_t d : ArrayRef<uint64_t>(t.ne).drop_front())
        overflow |= mulOverflow(rows, d, rows);
      overflow |=
          mulOverflow(t.ne[0] / block->first * block->second, rows, bytes) ||
          addOverflow(t.offset, bytes, end);
      if (overflow || end > dataSize)
        return fileError(
            g.path, "tensor '" + t.name + "' at offset " + Twine(g.dataOffset) +
                        " + " + Twine(t.offset) + " with " +
                        (overflow ? Twine("too many") : Twine(bytes)) +
                        " bytes extends past the end of the "
                        "file (" +
                        Twine(g.fileSize) + " bytes)");
      s.end = end;
    }
    spans.push_back(s);
  }
  llvm::stable_sort(
      spans, [](const Span &a, const Span &b) { return a.begin < b.begin; });
  auto describe = [&](const Span &s) {
    std::string text;
    raw_string_ostream os(text);
    os << "'" << s.t->name << "' (" << ggmlTypeName(s.t->type) << " ["
       << s.t->ne[0];
    for (uint64_t d : ArrayRef<uint64_t>(s.t->ne).drop_front())
      os << ", " << d;
    os << "]) [" << s.begin << ", ";
    if (s.end)
      os << *s.end;
    else
      os << "?";
    os << ")";
    return text;
  };
  std::string where =
      (" (offsets relative to the data section at " + Twine(g.dataOffset) + ")")
          .str();
  if (!spans.empty() && spans.front().begin != 0)
    return fileError(g.path, "bytes [0, " + Twine(spans.front().begin) +
                                 ") of the data section, before tensor " +
                                 describe(spans.front()) +
                                 ", belong to no tensor; GGUF tensor data is "
                                 "packed from offset 0, so this offset is "
                                 "probably corrupted" +
                                 where);
  for (size_t i = 1; i < spans.size(); ++i) {
    const Span &a = spans[i - 1], &b = spans[i];
    if (!a.end)
      continue;
    if (b.begin < *a.end)
      return fileError(g.path, "tensors " + describe(a) + " and " +
                                   describe(b) + " overlap" + where);
    uint64_t expected = alignTo(*a.end, g.alignment);
    if (b.begin > expected)
      return fileError(g.path,
                       "tensor " + describe(a) + " is followed by tensor " +
                           describe(b) + ", leaving bytes [" + Twine(*a.end) +
                           ", " + Twine(b.begin) +
                           ") unused; GGUF tensor data is packed (each tensor "
                           "padded to the alignment " +
                           Twine(g.alignment) + "), so the type or shape of '" +
                           a.t->name + "' or the offset of '" + b.t->name +
                           "' is probably wrong" + where);
  }
  if (!spans.empty() && spans.back().end &&
      dataSize > alignTo(*spans.back().end, g.alignment))
    return fileError(
        g.path, "the data section holds " + Twine(dataSize) +
                    " bytes but the last tensor " + describe(spans.back()) +
                    " ends at " + Twine(*spans.back().end) +
                    "; GGUF tensor data is packed, so its type or shape "
                    "is probably wrong" +
                    where);
  return Error::success();
}

/// Checks the RoPE frequency divisors `rope_freqs.weight` (F32, as
/// llama.cpp writes them): each finite and positive.
static Error checkRopeFreqs(const GgufFile &g, const ResolvedTensor &t) {
  if (t.source.storage != StorageType::F32)
    return fileError(g.path, "tensor 'rope_freqs.weight' is " +
                                 ggmlTypeName(t.info->type) +
                                 ", expected F32");
  const char *base = g.buffer->getBufferStart() + t.source.offset;
  for (uint64_t i = 0; i < t.source.bytes / 4; ++i) {
    float f;
    std::memcpy(&f, base + 4 * i, 4);
    if (!(f > 0.0f) || !std::isfinite(f))
      return fileError(g.path, "tensor 'rope_freqs.weight' element " +
                                   Twine(i) + " (offset " +
                                   Twine(t.source.offset + 4 * i) + ") is " +
                                   formatv("{0}", llvm::format("%g", double(f))).str() +
                                   ", expected a positive frequency divisor");
  }
  return Error::success();
}

/// Canonical name -> GGUF tensor name.
static std::string ggufName(StringRef canonical) {
  if (canonical == "tok_embeddings")
    return "token_embd.weight";
  if (canonical == "rope_freqs")
    return "rope_freqs.weight";
  if (canonical == "norm")
    return "output_norm.weight";
  if (canonical == "output")
    return "output.weight";
  // layers.<i>.<what>
  auto [layersPrefix, rest] = canonical.split('.');
  auto [index, what] = rest.split('.');
  (void)layersPrefix;
  static const std::pair<StringRef, StringRef> map[] = {
      {"attention_norm", "attn_norm"}, {"wq", "attn_q"},
      {"wk", "attn_k"},                {"wv", "attn_v"},
      {"wo", "attn_output"},           {"ffn_norm", "ffn_norm"},
      {"w1", "ffn_gate"},              {"w2", "ffn_down"},
      {"w3", "ffn_up"}};
  for (const auto &[from, to] : map)
    if (what == from)
      return ("blk." + index + "." + to + ".weight").str();
  static const std::pair<StringRef, StringRef> biases[] = {
      {"bq", "attn_q"}, {"bk", "attn_k"}, {"bv", "attn_v"}};
  for (const auto &[from, to] : biases)
    if (what == from)
      return ("blk." + index + "." + to + ".bias").str();
  return canonical.str();
}

/// tokenizer.chat_template and the end-of-turn ids: tokenizer.ggml.eot_token_id
/// and eom_token_id when present, then the EOS (llama.cpp's end-of-generation
/// set).
static Error chatFromGguf(const GgufFile &g, ModelDesc &model) {
  Expected<std::optional<std::string>> tmpl =
      getString(g, "tokenizer.chat_template");
  if (!tmpl)
    return tmpl.takeError();
  if (*tmpl)
    if (Error e = setChatTemplate(model, **tmpl,
                                  g.path + " (tokenizer.chat_template)"))
      return e;
  int64_t vocab = int64_t(model.tokenizer.pieces.size());
  for (StringRef key : {"tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    Expected<std::optional<int64_t>> id = getInt(g, key);
    if (!id)
      return id.takeError();
    if (*id)
      if (Error e = addEndOfTurnId(model, **id, vocab, g.path, key))
        return e;
  }
  return addEndOfTurnId(model, model.tokenizer.eosId, vocab, g.path,
                        "tokenizer.ggml.eos_token_id");
}

Expected<ModelDesc> importGguf(StringRef path, StringRef tokenizer) {
  Expected<GgufFile> parsed = parseGguf(path);
  if (!parsed)
    return parsed.takeError();
  const GgufFile &g = *parsed;

  Expected<std::optional<std::string>> arch =
      getString(g, "general.architecture");
  if (!arch)
    return arch.takeError();
  if (!*arch)
    return fileError(path, "missing key 'general.architecture'");
  if (**arch != "llama" && **arch != "qwen2")
    return fileError(path, "unsupported architecture '" + **arch +
                               "' (expected 'llama' or 'qwen2')");
  // Keys are "<arch>.<name>" (llama.cpp LLM_KV).
  const std::string a = **arch + ".";
  auto key = [&](StringRef name) { return a + name.str(); };

  ModelDesc model;
  LlamaConfig &c = model.config;
  c.architecture = **arch;
  // Qwen2: q/k/v biases, and NEOX-style RoPE (rotate-half pairs), so its
  // Q/K rows are not permuted by convert_hf_to_gguf as Llama's are.
  bool qwen2 = **arch == "qwen2";
  c.qkvBias = qwen2;
  c.sourceFormat = "gguf";
  c.sourcePath = path.str();
  Expected<std::optional<std::string>> name = getString(g, "general.name");
  if (!name)
    return name.takeError();
  c.name = name->value_or(sys::path::stem(path).str());

  Expected<std::optional<int64_t>> experts = getInt(g, key("expert_count"));
  if (!experts)
    return experts.takeError();
  if (experts->value_or(0) > 0)
    return fileError(path, "mixture-of-experts model (" + key("expert_count") +
                               " = " + Twine(**experts) +
                               ") is not supported");
  // RoPE scaling: "linear" (with its factor) is supported; llama.cpp writes
  // Llama 3.1's scaling as the rope_freqs.weight tensor instead (below).
  Expected<std::optional<std::string>> scaling =
      getString(g, key("rope.scaling.type"));
  if (!scaling)
    return scaling.takeError();
  Expected<std::optional<double>> scaleFactor =
      getFloat(g, key("rope.scaling.factor"));
  if (!scaleFactor)
    return scaleFactor.takeError();
  Expected<std::optional<double>> scaleLinear =
      getFloat(g, key("rope.scale_linear"));
  if (!scaleLinear)
    return scaleLinear.takeError();
  if (*scaling && **scaling != "none" && **scaling != "linear")
    return fileError(path, "unsupported " + key("rope.scaling.type") + " '" +
                               **scaling +
                               "' (supported: none, linear; Llama 3 scaling "
                               "comes as the rope_freqs.weight tensor)");
  if (*scaling && **scaling == "linear") {
    if (!*scaleFactor)
      return fileError(path, key("rope.scaling.type") +
                                 " is 'linear' but " +
                                 key("rope.scaling.factor") + " is missing");
  } else if (*scaleLinear && **scaleLinear != 1.0) {
    *scaleFactor = **scaleLinear; // the older key
  } else {
    *scaleFactor = std::nullopt;
  }
  if (*scaleFactor) {
    if (!(**scaleFactor > 0.0) || !std::isfinite(**scaleFactor))
      return fileError(path, key("rope.scaling.factor") + " is " +
                                 formatv("{0}", llvm::format("%g", **scaleFactor)).str() +
                                 ", expected a positive number");
    if (**scaleFactor != 1.0) {
      c.ropeScaling.kind = RopeScaling::Kind::Linear;
      c.ropeScaling.factor = static_cast<float>(**scaleFactor);
    }
  }
  Expected<std::optional<int64_t>> window =
      getInt(g, key("attention.sliding_window"));
  if (!window)
    return window.takeError();
  if (*window && **window <= 0)
    return fileError(path, key("attention.sliding_window") + " is " +
                               Twine(**window) + ", expected a positive "
                               "window length");

  struct IntField {
    int64_t *dst;
    std::string key;
  } required[] = {{&c.dim, key("embedding_length")},
                  {&c.hiddenDim, key("feed_forward_length")},
                  {&c.nLayers, key("block_count")},
                  {&c.nHeads, key("attention.head_count")},
                  {&c.maxSeqLen, key("context_length")}};
  for (IntField &f : required) {
    Expected<int64_t> v = getRequiredInt(g, f.key);
    if (!v)
      return v.takeError();
    *f.dst = *v;
  }
  for (IntField &f : required)
    if (*f.dst <= 0)
      return fileError(path, f.key + " must be positive, got " + Twine(*f.dst));
  Expected<std::optional<int64_t>> kv = getInt(g, key("attention.head_count_kv"));
  Expected<std::optional<double>> eps =
      getFloat(g, key("attention.layer_norm_rms_epsilon"));
  Expected<std::optional<double>> theta = getFloat(g, key("rope.freq_base"));
  Expected<std::optional<int64_t>> vocab = getInt(g, key("vocab_size"));
  Expected<std::optional<int64_t>> keyLen = getInt(g, key("attention.key_length"));
  Expected<std::optional<int64_t>> valLen =
      getInt(g, key("attention.value_length"));
  Expected<std::optional<int64_t>> ropeDims =
      getInt(g, key("rope.dimension_count"));
  if (!kv)
    return kv.takeError();
  if (!eps)
    return eps.takeError();
  if (!theta)
    return theta.takeError();
  if (!vocab)
    return vocab.takeError();
  if (!keyLen)
    return keyLen.takeError();
  if (!valLen)
    return valLen.takeError();
  if (!ropeDims)
    return ropeDims.takeError();
  c.nKvHeads = kv->value_or(c.nHeads);
  c.rmsNormEps = static_cast<float>(eps->value_or(1e-5));
  c.ropeTheta = static_cast<float>(theta->value_or(10000.0));
  if (*vocab) {
    c.vocabSize = **vocab;
  } else if (const GgufValue *tokens = findKey(g, "tokenizer.ggml.tokens");
             tokens && tokens->type == kArray) {
    c.vocabSize = static_cast<int64_t>(tokens->count);
  } else if (auto emb = g.tensorIndex.find("token_embd.weight");
             emb != g.tensorIndex.end() &&
             g.tensors[emb->second].ne.size() == 2) {
    c.vocabSize = static_cast<int64_t>(g.tensors[emb->second].ne[1]);
  } else {
    return fileError(path, "cannot determine the vocabulary size: no "
                           "'" + a + "vocab_size' or 'tokenizer.ggml.tokens' "
                           "key and no 2-D 'token_embd.weight'");
  }
  if (c.nHeads > 0 && !*keyLen && c.dim % c.nHeads != 0)
    return fileError(path, a + "embedding_length " + Twine(c.dim) +
                               " is not a multiple of " + a +
                               "attention.head_count " +
                               Twine(c.nHeads));
  c.headDim = keyLen->value_or(c.nHeads > 0 ? c.dim / c.nHeads : 0);
  if (*valLen && **valLen != c.headDim)
    return fileError(path, a + "attention.value_length " + Twine(**valLen) +
                               " differs from the key length " +
                               Twine(c.headDim) + " (not supported)");
  if (*ropeDims && **ropeDims != c.headDim)
    return fileError(path, a + "rope.dimension_count " + Twine(**ropeDims) +
                               " differs from the head dimension " +
                               Twine(c.headDim) +
                               " (partial rotary embeddings are not "
                               "supported)");
  if (*window && **window < c.maxSeqLen)
    c.slidingWindow = **window;
  // Per-pair RoPE frequency divisors (Llama 3.1 as llama.cpp converts it).
  c.ropeFreqFactors = g.tensorIndex.count("rope_freqs.weight") > 0;
  if (c.ropeFreqFactors && c.ropeScaling.kind != RopeScaling::Kind::None)
    return fileError(path, "tensor 'rope_freqs.weight' together with " +
                               key("rope.scaling.type") +
                               " 'linear' is not supported");
  if (Error e = checkConfig(c, path))
    return std::move(e);

  SmallVector<StringRef> tensorNames;
  for (const GgufTensor &t : g.tensors)
    tensorNames.push_back(t.name);
  if (Error e = checkNoExtraLayers(path, tensorNames, "blk.", c.nLayers,
                                   key("block_count")))
    return std::move(e);
  for (StringRef t : tensorNames)
    if (t.starts_with("blk.") && t.ends_with(".bias") &&
        !(c.qkvBias && (t.ends_with(".attn_q.bias") ||
                        t.ends_with(".attn_k.bias") ||
                        t.ends_with(".attn_v.bias"))))
      return fileError(path, "holds bias tensor '" + t + "', which architecture '" +
                                 **arch + "' does not have (only qwen2's "
                                 "attn_q/attn_k/attn_v biases are supported)");

  // Tied embeddings: no output.weight, or one byte-identical to token_embd.
  const GgufTensor *embInfo = nullptr;
  for (const CanonicalWeight &cw : canonicalWeights(c)) {
    std::string tensorName = ggufName(cw.name);
    if (cw.name == "output") {
      const WeightDesc &emb = model.weights.front();
      bool tied = !g.tensorIndex.count(tensorName);
      if (!tied) {
        Expected<ResolvedTensor> out = resolveTensor(g, tensorName, cw.shape);
        if (!out)
          return out.takeError();
        tied = out->info->type == embInfo->type &&
               out->source.bytes == emb.source.bytes &&
               std::memcmp(g.buffer->getBufferStart() + out->source.offset,
                           g.buffer->getBufferStart() + emb.source.offset,
                           emb.source.bytes) == 0;
        if (!tied) {
          model.weights.push_back({cw.name, std::move(out->source), {}});
          if (blockFormatOf(model.weights.back().source.storage))
            keepGgufBlocks(model.weights.back());
          continue;
        }
      }
      c.tiedEmbeddings = true;
      model.weights.push_back({cw.name, emb.source, {}});
      if (blockFormatOf(model.weights.back().source.storage))
        keepGgufBlocks(model.weights.back());
      continue;
    }
    Expected<ResolvedTensor> t = resolveTensor(g, tensorName, cw.shape);
    if (!t)
      return t.takeError();
    if (cw.name == "tok_embeddings")
      embInfo = t->info;
    StringRef what = StringRef(cw.name).rsplit('.').second;
    if (cw.name == "rope_freqs") {
      if (Error e = checkRopeFreqs(g, *t))
        return std::move(e);
      model.weights.push_back({cw.name, std::move(t->source), {}});
      continue;
    }
    if (cw.shape.size() == 1 && blockFormatOf(t->source.storage))
      return fileError(path, "tensor '" + tensorName + "' is " +
                                 ggmlTypeName(t->info->type) +
                                 "; vectors must be F32, F16 or BF16");
    // Llama's GGUF Q/K rows are already in adjacent-pair order (no
    // transform); Qwen2's (and their biases) are in rotate-half order.
    std::vector<WeightTransform> rows;
    if (qwen2 && (what == "wq" || what == "bq"))
      rows.push_back({WeightTransform::Kind::RopeHalfToAdjacent, c.nHeads});
    else if (qwen2 && (what == "wk" || what == "bk"))
      rows.push_back({WeightTransform::Kind::RopeHalfToAdjacent, c.nKvHeads});
    model.weights.push_back({cw.name, std::move(t->source), rows});
    if (!rows.empty() && cw.shape.size() == 2 &&
        blockFormatOf(model.weights.back().source.storage) &&
        !keepGgufQuantized(model.weights.back().source.storage)) {
      // Raw blocks cannot be row-permuted in place: decode to float.
      model.notes.push_back(
          "tensor '" + tensorName + "' (" +
          stringifyStorageType(model.weights.back().source.storage).str() +
          ") is decoded to float: its rows need reordering into Kiln's "
          "RoPE layout, which block-format weights cannot take");
      continue;
    }
    // Q4_0 / Q8_0 linears are repacked into Kiln's W4A16 / W8A16 layout
    // (Prequantized.h); every other matrix in a GGML block format (the
    // embedding and the classifier included) stays in it, raw blocks read by
    // the block kernels.
    WeightDesc &w = model.weights.back();
    bool embeddingOrOutput = cw.name == "tok_embeddings" || cw.name == "output";
    if (cw.shape.size() == 2 && !embeddingOrOutput &&
        keepGgufQuantized(w.source.storage))
      makeGgufQuantized(w);
    else if (cw.shape.size() == 2 && blockFormatOf(w.source.storage))
      keepGgufBlocks(w);
  }

  // Tensor types and shapes are known to be sane now: check the layout.
  if (Error e = checkTensorLayout(g))
    return std::move(e);

  // Tokenizer: exactly vocab_size pieces.
  Expected<TokenizerDesc> tok =
      tokenizer.empty() ? tokenizerFromGguf(g) : readTokenizer(tokenizer);
  if (!tok)
    return tok.takeError();
  if (tokenizer.empty() && tok->pieces.empty())
    return fileError(path, "no tokenizer.ggml.tokens: the file has no "
                           "vocabulary; pass --tokenizer FILE");
  if (Error e = fitTokenizer(*tok, tokenizer.empty() ? path : tokenizer,
                             c.vocabSize, /*allowPadding=*/false))
    return std::move(e);
  model.tokenizer = std::move(*tok); // its notes: importModel
  if (Error e = chatFromGguf(g, model))
    return std::move(e);
  return model;
}

} // namespace mlir::kiln
