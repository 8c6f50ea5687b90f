//===- ImportUtils.cpp - Helpers shared by the importers ------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <cstring>

using namespace llvm;

namespace mlir::kiln::detail {

Error makeError(const Twine &msg) {
  return createStringError(inconvertibleErrorCode(), msg);
}

Error fileError(StringRef file, const Twine &msg) {
  return makeError(file + ": " + msg);
}

Error prefixError(StringRef file, Error err) {
  if (!err)
    return Error::success();
  return fileError(file, toString(std::move(err)));
}

Expected<uint64_t> getFileSize(StringRef path) {
  sys::fs::file_status status;
  if (std::error_code ec = sys::fs::status(path, status))
    return fileError(path, "cannot open: " + ec.message());
  if (status.type() == sys::fs::file_type::directory_file)
    return fileError(path, "is a directory, expected a file");
  return status.getSize();
}

Error readFileRange(StringRef path, uint64_t offset, MutableArrayRef<char> out,
                    StringRef what) {
  Expected<sys::fs::file_t> fd = sys::fs::openNativeFileForRead(path);
  if (!fd)
    return fileError(path, "cannot open: " + toString(fd.takeError()));
  uint64_t done = 0;
  Error err = Error::success();
  while (done < out.size()) {
    Expected<size_t> n = sys::fs::readNativeFileSlice(
        *fd, out.slice(done), offset + done);
    if (!n) {
      err = fileError(path, "cannot read " + what + " at offset " +
                                Twine(offset + done) + ": " +
                                toString(n.takeError()));
      break;
    }
    if (*n == 0) {
      err = fileError(path, "unexpected end of file reading " + what +
                                " at offset " + Twine(offset + done) +
                                " (needed " + Twine(out.size()) +
                                " bytes from offset " + Twine(offset) + ")");
      break;
    }
    done += *n;
  }
  sys::fs::closeFile(*fd);
  return err;
}

//===----------------------------------------------------------------------===//
// ByteReader
//===----------------------------------------------------------------------===//

Error ByteReader::error(const Twine &msg) const {
  return fileError(file, msg + " at offset " + Twine(offset()));
}

Error ByteReader::need(uint64_t n, const Twine &what) {
  if (n <= remaining())
    return Error::success();
  return fileError(file, "truncated: " + what + " at offset " +
                             Twine(offset()) + " needs " + Twine(n) +
                             " bytes but only " + Twine(remaining()) +
                             " remain");
}

template <typename T>
static T readLE(const char *p) {
  return support::endian::read<T, llvm::endianness::little>(p);
}

Error ByteReader::readU8(uint8_t &v, const Twine &what) {
  if (Error e = need(1, what))
    return e;
  v = static_cast<uint8_t>(data[pos]);
  pos += 1;
  return Error::success();
}

Error ByteReader::readU16(uint16_t &v, const Twine &what) {
  if (Error e = need(2, what))
    return e;
  v = readLE<uint16_t>(data.data() + pos);
  pos += 2;
  return Error::success();
}

Error ByteReader::readU32(uint32_t &v, const Twine &what) {
  if (Error e = need(4, what))
    return e;
  v = readLE<uint32_t>(data.data() + pos);
  pos += 4;
  return Error::success();
}

Error ByteReader::readU64(uint64_t &v, const Twine &what) {
  if (Error e = need(8, what))
    return e;
  v = readLE<uint64_t>(data.data() + pos);
  pos += 8;
  return Error::success();
}

Error ByteReader::readI32(int32_t &v, const Twine &what) {
  uint32_t u;
  if (Error e = readU32(u, what))
    return e;
  v = static_cast<int32_t>(u);
  return Error::success();
}

Error ByteReader::readF32(float &v, const Twine &what) {
  uint32_t u;
  if (Error e = readU32(u, what))
    return e;
  std::memcpy(&v, &u, 4);
  return Error::success();
}

Error ByteReader::readF64(double &v, const Twine &what) {
  uint64_t u;
  if (Error e = readU64(u, what))
    return e;
  std::memcpy(&v, &u, 8);
  return Error::success();
}

Error ByteReader::readBytes(uint64_t n, StringRef &out, const Twine &what) {
  if (Error e = need(n, what))
    return e;
  out = data.substr(pos, n);
  pos += n;
  return Error::success();
}

Error ByteReader::skip(uint64_t n, const Twine &what) {
  if (Error e = need(n, what))
    return e;
  pos += n;
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Shapes, config, canonical weights
//===----------------------------------------------------------------------===//

std::string formatShape(ArrayRef<int64_t> shape) {
  std::string s;
  raw_string_ostream os(s);
  os << '[';
  interleave(shape, os, ", ");
  os << ']';
  return s;
}

std::optional<uint64_t> numElements(ArrayRef<int64_t> shape) {
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return std::nullopt;
    uint64_t r;
    if (mulOverflow(n, static_cast<uint64_t>(d), r))
      return std::nullopt;
    n = r;
  }
  return n;
}

std::optional<uint64_t> storageBytes(StorageType storage, uint64_t numel) {
  uint64_t r;
  switch (storage) {
  case StorageType::F32:
  case StorageType::I32:
    if (mulOverflow(numel, 4, r))
      return std::nullopt;
    return r;
  case StorageType::F16:
  case StorageType::BF16:
    if (mulOverflow(numel, 2, r))
      return std::nullopt;
    return r;
  case StorageType::Q8_0:
    if (numel % 32 != 0)
      return std::nullopt;
    return numel / 32 * 34;
  case StorageType::Q4_0:
    if (numel % 32 != 0)
      return std::nullopt;
    return numel / 32 * 18;
  case StorageType::Synthetic:
    return 0;
  }
  return std::nullopt;
}

static std::string formatFloat(float v) {
  std::string s;
  raw_string_ostream(s) << format("%g", static_cast<double>(v));
  return s;
}

Error checkLimits(const LlamaConfig &c, StringRef file) {
  // Sizes beyond these bounds are corrupted headers, not models; they would
  // overflow the shape arithmetic below.
  struct Limit {
    int64_t value;
    StringRef what;
    int log2;
  } limits[] = {{c.dim, "dim", 24},
                {c.hiddenDim, "hidden_dim", 24},
                {c.nLayers, "n_layers", 12},
                {c.nHeads, "n_heads", 16},
                {c.nKvHeads, "n_kv_heads", 16},
                {c.headDim, "head_dim", 16},
                {c.vocabSize, "vocab_size", 26},
                {c.maxSeqLen, "max_seq_len", 26}};
  for (const Limit &l : limits)
    if (l.value > (int64_t(1) << l.log2))
      return fileError(file, "implausible " + l.what + " " + Twine(l.value) +
                                 ": it exceeds the limit of " +
                                 Twine(int64_t(1) << l.log2) + " (2^" +
                                 Twine(l.log2) +
                                 ") for this field, so the file is probably "
                                 "corrupted");
  return Error::success();
}

Error checkConfig(const LlamaConfig &c, StringRef file) {
  auto positive = [&](int64_t v, StringRef what) -> Error {
    if (v > 0)
      return Error::success();
    return fileError(file, Twine(what) + " is " + Twine(v) +
                               ", expected a positive value");
  };
  if (Error e = positive(c.dim, "dim"))
    return e;
  if (Error e = positive(c.hiddenDim, "hidden_dim"))
    return e;
  if (Error e = positive(c.nLayers, "n_layers"))
    return e;
  if (Error e = positive(c.nHeads, "n_heads"))
    return e;
  if (Error e = positive(c.nKvHeads, "n_kv_heads"))
    return e;
  if (Error e = positive(c.headDim, "head_dim"))
    return e;
  if (Error e = positive(c.vocabSize, "vocab_size"))
    return e;
  if (Error e = positive(c.maxSeqLen, "max_seq_len"))
    return e;
  if (Error e = checkLimits(c, file))
    return e;
  if (c.nHeads % c.nKvHeads != 0)
    return fileError(file, "n_heads (" + Twine(c.nHeads) +
                               ") is not a multiple of n_kv_heads (" +
                               Twine(c.nKvHeads) + ")");
  if (c.headDim % 2 != 0)
    return fileError(file, "head_dim " + Twine(c.headDim) +
                               " is odd; rotary embeddings need an even "
                               "head dimension");
  if (!(c.rmsNormEps > 0.0f) || !(c.rmsNormEps < 1.0f))
    return fileError(file, "rms_norm_eps " + formatFloat(c.rmsNormEps) +
                               " is outside (0, 1)");
  if (!(c.ropeTheta > 1.0f) || !std::isfinite(c.ropeTheta))
    return fileError(file, "rope_theta " + formatFloat(c.ropeTheta) +
                               " is not a finite value > 1");
  return Error::success();
}


Error checkShape(StringRef file, StringRef tensor, ArrayRef<int64_t> actual,
                 ArrayRef<int64_t> expected) {
  if (actual == expected)
    return Error::success();
  return fileError(file, tensor + ": shape " + formatShape(actual) +
                             " but the config implies " +
                             formatShape(expected));
}

//===----------------------------------------------------------------------===//
// Number formats
//===----------------------------------------------------------------------===//

float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal: normalise.
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while ((mant & 0x400) == 0);
      mant &= 0x3ff;
      bits = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

bool isBytePiece(StringRef piece) {
  return piece.size() == 6 && piece.starts_with("<0x") &&
         piece.ends_with(">") && isHexDigit(piece[3]) && isHexDigit(piece[4]);
}

std::string quotePiece(StringRef piece) {
  std::string out;
  raw_string_ostream os(out);
  os << '\'';
  printEscapedString(piece, os);
  os << '\'';
  return out;
}

Error checkTokenizer(const TokenizerDesc &tok, StringRef file) {
  size_t n = tok.pieces.size();
  if (tok.scores.size() != n || tok.types.size() != n)
    return fileError(file, "tokenizer has " + Twine(n) + " pieces but " +
                               Twine(tok.scores.size()) + " scores and " +
                               Twine(tok.types.size()) + " types");
  if (tok.model != "spm" && tok.model != "bpe")
    return fileError(file, "tokenizer model '" + tok.model +
                               "' is not implemented (expected 'spm' or "
                               "'bpe')");
  if (n == 0)
    return Error::success();
  if (n > static_cast<size_t>(INT32_MAX))
    return fileError(file, "tokenizer has " + Twine(n) +
                               " pieces, more than ids can address");
  for (size_t id = 0; id < n; ++id) {
    if (!std::isfinite(tok.scores[id]))
      return fileError(file, "token " + Twine(id) + " " +
                                 quotePiece(tok.pieces[id]) + " has score " +
                                 formatFloat(tok.scores[id]) +
                                 ", expected a finite number");
    int32_t type = tok.types[id];
    if (type < 1 || type > 6)
      return fileError(file, "token " + Twine(id) + " " +
                                 quotePiece(tok.pieces[id]) + " has type " +
                                 Twine(type) +
                                 ", expected 1 (normal), 2 (unknown), 3 "
                                 "(control), 4 (user-defined), 5 (unused) or "
                                 "6 (byte)");
  }
  auto checkId = [&](int32_t id, StringRef what, bool allowNone) -> Error {
    if ((allowNone && id == -1) || (id >= 0 && static_cast<size_t>(id) < n))
      return Error::success();
    return fileError(file, Twine(what) + " " + Twine(id) +
                               " is out of range for a vocabulary of " +
                               Twine(n) + " pieces");
  };
  if (Error e = checkId(tok.bosId, "bos id", false))
    return e;
  if (Error e = checkId(tok.eosId, "eos id", false))
    return e;
  if (Error e = checkId(tok.unkId, "unk id", true))
    return e;
  if (tok.model != "bpe") {
    if (!tok.merges.empty())
      return fileError(file, "tokenizer model 'spm' merges by score but has " +
                                 Twine(tok.merges.size()) + " merges");
    return Error::success();
  }
  // Merges: "left right", both halves and their concatenation are pieces.
  // The artifact spells a merge with one space, so halves cannot hold one.
  StringSet<> known;
  for (const std::string &p : tok.pieces)
    known.insert(p);
  for (auto [rank, m] : llvm::enumerate(tok.merges)) {
    StringRef merge(m);
    auto [left, right] = merge.split(' ');
    std::string where =
        "merge " + std::to_string(rank) + " " + quotePiece(merge);
    if (left.empty() || right.empty() || right.contains(' '))
      return fileError(file, where + " is not two non-empty pieces "
                                     "separated by one space");
    if (!known.contains(left))
      return fileError(file, where + ": piece " + quotePiece(left) +
                                 " is not in the vocabulary");
    if (!known.contains(right))
      return fileError(file, where + ": piece " + quotePiece(right) +
                                 " is not in the vocabulary");
    if (!known.contains((left + right).str()))
      return fileError(file, where + ": merged piece " +
                                 quotePiece((left + right).str()) +
                                 " is not in the vocabulary");
  }
  return Error::success();
}

Error rejectUserDefinedPieces(const TokenizerDesc &tok, StringRef file) {
  for (auto [id, type] : llvm::enumerate(tok.types))
    if (type == 4)
      return fileError(file, "token " + Twine(id) + " " +
                                 quotePiece(tok.pieces[id]) +
                                 " is user-defined (type 4): matching "
                                 "user-defined pieces inside text is not "
                                 "implemented");
  return Error::success();
}

Error fitTokenizer(TokenizerDesc &tok, StringRef tokFile, int64_t vocabSize,
                   bool allowPadding) {
  int64_t n = static_cast<int64_t>(tok.pieces.size());
  if (n == vocabSize)
    return Error::success();
  if (n > vocabSize || !allowPadding)
    return makeError("tokenizer " + tokFile + " has " + Twine(n) +
                     " pieces but the model's vocab_size is " +
                     Twine(vocabSize));
  // Padded embedding tables (vocab_size rounded up for GPU efficiency) are
  // common in Hugging Face checkpoints. The extra ids get control pieces:
  // never produced by the encoder and decoded to nothing.
  for (int64_t id = n; id < vocabSize; ++id) {
    tok.pieces.push_back("<pad_" + std::to_string(id) + ">");
    tok.scores.push_back(0.0f);
    tok.types.push_back(3);
  }
  return Error::success();
}

std::string joinPath(StringRef dir, StringRef name) {
  SmallString<256> p(dir);
  sys::path::append(p, name);
  return std::string(p);
}

} // namespace mlir::kiln::detail
