//===- ImportUtils.cpp - Helpers shared by the importers ------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "chat/ChatTemplate.h"

#include "kiln_rt/block_formats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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

//===----------------------------------------------------------------------===//
// Regular files, bounded reads, JSON depth
//===----------------------------------------------------------------------===//

/// "a FIFO (named pipe)", "a directory", ... for a non-regular `mode`.
static StringRef describeFileKind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO (named pipe)";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

static Error notRegularError(StringRef path, mode_t mode, StringRef what) {
  return fileError(path, "is " + describeFileKind(mode) + ", expected " + what);
}

static Error errnoError(StringRef path, int err) {
  return fileError(path, Twine("cannot open: ") + std::strerror(err));
}

Error checkRegularFile(StringRef path, StringRef what) {
  struct stat st;
  if (::stat(path.str().c_str(), &st) != 0)
    return errnoError(path, errno);
  if (!S_ISREG(st.st_mode))
    return notRegularError(path, st.st_mode, what);
  return Error::success();
}

Expected<int> openRegularFile(StringRef path, StringRef what,
                              uint64_t maxBytes, uint64_t &size) {
  // stat first so that no device is even opened (opening some has side
  // effects), then open without blocking and fstat the descriptor, so a
  // file swapped for a FIFO in between cannot hang us either.
  if (Error e = checkRegularFile(path, what))
    return std::move(e);
  std::string p = path.str();
  int fd;
  do {
    fd = ::open(p.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0)
    return errnoError(path, errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return errnoError(path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return notRegularError(path, st.st_mode, what);
  }
  // Reads of a regular file never block; clear the flag anyway.
  if (int flags = ::fcntl(fd, F_GETFL); flags >= 0)
    (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  size = static_cast<uint64_t>(st.st_size);
  if (size > maxBytes) {
    ::close(fd);
    return fileError(path, "is " + Twine(size) +
                               " bytes, more than the limit of " +
                               Twine(maxBytes) + " bytes for " + what);
  }
  return fd;
}

Expected<std::unique_ptr<MemoryBuffer>>
readRegularFile(StringRef path, uint64_t maxBytes, StringRef what) {
  uint64_t size = 0;
  Expected<int> fd = openRegularFile(path, what, maxBytes, size);
  if (!fd)
    return fd.takeError();
  ErrorOr<std::unique_ptr<MemoryBuffer>> buf = MemoryBuffer::getOpenFile(
      *fd, path, size, /*RequiresNullTerminator=*/false);
  ::close(*fd);
  if (!buf)
    return fileError(path, "cannot read: " + buf.getError().message());
  return std::move(*buf);
}

Error checkJsonDepth(StringRef text, StringRef file, uint64_t baseOffset,
                     unsigned maxDepth) {
  // Jumps from one structural character to the next with
  // StringRef::find_first_of (a table scan): tokenizer.json files are
  // megabytes of string contents, which need no per-character work.
  constexpr StringLiteral kStructural = "\"[]{}", kInString = "\"\\";
  unsigned depth = 0;
  for (size_t i = text.find_first_of(kStructural); i != StringRef::npos;
       i = text.find_first_of(kStructural, i + 1)) {
    char c = text[i];
    if (c == '"') {
      // To the closing quote; an escaped character cannot end the string.
      i = text.find_first_of(kInString, i + 1);
      while (i != StringRef::npos && text[i] == '\\')
        i = text.find_first_of(kInString, i + 2);
      if (i == StringRef::npos)
        break;
    } else if (c == '[' || c == '{') {
      if (++depth > maxDepth)
        return fileError(file, "JSON nested deeper than " + Twine(maxDepth) +
                                   " at offset " + Twine(baseOffset + i));
    } else if (depth > 0) {
      --depth;
    }
  }
  return Error::success();
}

Expected<json::Value> readJsonFile(StringRef path, uint64_t maxBytes,
                                   StringRef what) {
  Expected<std::unique_ptr<MemoryBuffer>> buf =
      readRegularFile(path, maxBytes, what);
  if (!buf)
    return buf.takeError();
  StringRef text = (*buf)->getBuffer();
  if (Error e = checkJsonDepth(text, path))
    return std::move(e);
  Expected<json::Value> v = json::parse(text);
  if (!v)
    return fileError(path, "invalid JSON: " + toString(v.takeError()));
  return v;
}

Expected<uint64_t> getFileSize(StringRef path, StringRef what) {
  uint64_t size = 0;
  Expected<int> fd = openRegularFile(path, what, UINT64_MAX, size);
  if (!fd)
    return fd.takeError();
  ::close(*fd);
  return size;
}

Error readFileRange(StringRef path, uint64_t offset, MutableArrayRef<char> out,
                    StringRef what) {
  uint64_t size = 0;
  Expected<int> fd = openRegularFile(path, "a regular file", UINT64_MAX, size);
  if (!fd)
    return fd.takeError();
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
  ::close(*fd);
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
  case StorageType::Synthetic:
    return 0;
  default:
    break;
  }
  if (std::optional<int64_t> f = blockFormatOf(storage)) {
    uint64_t elems = uint64_t(kiln_block_elems(*f));
    if (numel % elems != 0)
      return std::nullopt;
    return numel / elems * uint64_t(kiln_block_bytes(*f));
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
                {c.maxSeqLen, "max_seq_len", 40}};
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
  if (tok.model != "spm" && tok.model != "bpe" && tok.model != "byte_bpe")
    return fileError(file, "tokenizer model '" + tok.model +
                               "' is not implemented (expected 'spm', "
                               "'bpe' or 'byte_bpe')");
  if (!tok.normalizer.empty() &&
      (tok.normalizer != "nfc" || tok.model != "byte_bpe"))
    return fileError(file, "tokenizer normalizer '" + tok.normalizer +
                               "' is not implemented (only 'nfc', for "
                               "'byte_bpe')");
  if (tok.model != "byte_bpe" && !tok.preTokenizerRegexes.empty())
    return fileError(file, "tokenizer model '" + tok.model +
                               "' has pre-tokenizer patterns (only "
                               "'byte_bpe' uses them)");
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
  if (tok.model == "byte_bpe") {
    StringMap<int32_t> normal;
    for (auto [id, p] : llvm::enumerate(tok.pieces))
      if (tok.types[id] == 1)
        normal.try_emplace(p, static_cast<int32_t>(id));
    // Bytes a vocabulary was never trained on may lack a symbol (they
    // encode to unk_id or nothing); printable ASCII, tab, LF, CR may not.
    for (unsigned b = 0; b < 256; ++b) {
      std::string symbol = gpt2ByteSymbol(static_cast<uint8_t>(b));
      bool required = (b >= 0x20 && b < 0x7f) || b == '\t' || b == '\n' ||
                      b == '\r';
      if (required && !normal.count(symbol)) {
        char hex[8];
        std::snprintf(hex, sizeof(hex), "0x%02x", b);
        return fileError(file, "byte-level vocabulary has no normal piece "
                               "for byte " +
                                   Twine(hex) + " (its GPT-2 symbol " +
                                   quotePiece(symbol) + ")");
      }
    }
    for (auto [i, pattern] : llvm::enumerate(tok.preTokenizerRegexes))
      if (Error e = checkPreTokenizerRegex(pattern, i, file))
        return e;
  }
  if (tok.model == "spm") {
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
  // Byte-level vocabularies match control pieces in text, so theirs are
  // unused (type 5) instead: never matched, never produced.
  for (int64_t id = n; id < vocabSize; ++id) {
    tok.pieces.push_back("<pad_" + std::to_string(id) + ">");
    tok.scores.push_back(0.0f);
    tok.types.push_back(tok.model == "byte_bpe" ? 5 : 3);
  }
  return Error::success();
}

std::string joinPath(StringRef dir, StringRef name) {
  SmallString<256> p(dir);
  sys::path::append(p, name);
  return std::string(p);
}

llvm::Error setChatTemplate(ModelDesc &model, std::string text,
                            llvm::StringRef source) {
  if (text.size() > kMaxChatTemplateBytes)
    return fileError(source, "chat template is " + llvm::Twine(text.size()) +
                                 " bytes, more than the " +
                                 llvm::Twine(kMaxChatTemplateBytes) +
                                 " Kiln accepts");
  ::kiln::chat::Template parsed;
  std::string error;
  if (!parsed.parse(text, source.str(), error))
    model.notes.push_back("the chat template does not parse (" + error +
                          "); it is stored, but kiln-run --chat will need "
                          "--chat-template FILE");
  model.chat.tmpl = std::move(text);
  model.chat.source = source.str();
  return llvm::Error::success();
}

llvm::Error addEndOfTurnId(ModelDesc &model, int64_t id, int64_t vocab,
                           llvm::StringRef file, llvm::StringRef field) {
  if (id < 0 || id >= vocab)
    return fileError(file, field + " is " + llvm::Twine(id) +
                               ", outside the vocabulary [0, " +
                               llvm::Twine(vocab) + ")");
  std::vector<int32_t> &ids = model.chat.endOfTurnIds;
  if (std::find(ids.begin(), ids.end(), int32_t(id)) == ids.end())
    ids.push_back(int32_t(id));
  return llvm::Error::success();
}

} // namespace mlir::kiln::detail

llvm::Error mlir::kiln::detail::checkNoExtraLayers(
    llvm::StringRef file, llvm::ArrayRef<llvm::StringRef> names,
    llvm::StringRef layerPrefix, int64_t numLayers,
    llvm::StringRef layersField) {
  std::optional<std::pair<uint64_t, llvm::StringRef>> first;
  for (llvm::StringRef name : names) {
    if (!name.consume_front(layerPrefix))
      continue;
    uint64_t layer;
    llvm::StringRef rest = name;
    if (rest.consumeInteger(10, layer) || !rest.starts_with(".") ||
        layer < static_cast<uint64_t>(numLayers))
      continue;
    llvm::StringRef full(name.data() - layerPrefix.size(),
                         name.size() + layerPrefix.size());
    if (!first || std::make_pair(layer, full) < *first)
      first = std::make_pair(layer, full);
  }
  if (!first)
    return llvm::Error::success();
  return fileError(file, "holds tensor '" + first->second + "' of layer " +
                             llvm::Twine(first->first) + ", but " +
                             layersField + " is " + llvm::Twine(numLayers) +
                             " (layers 0.." + llvm::Twine(numLayers - 1) +
                             "): the config and the weights disagree");
}
