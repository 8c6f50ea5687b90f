//===- ImportUtils.h - Helpers shared by the importers ----------*- C++ -*-===//
//
// Internal to KilnImport: bounds-checked byte reading, error construction,
// the canonical weight list and config validation.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IMPORT_IMPORTUTILS_H
#define KILN_DIALECTS_KILN_IMPORT_IMPORTUTILS_H

#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <optional>

namespace mlir::kiln::detail {

/// An error whose message is `msg`.
llvm::Error makeError(const llvm::Twine &msg);

/// An error whose message is "<file>: <msg>".
llvm::Error fileError(llvm::StringRef file, const llvm::Twine &msg);

/// Prefixes the message of `err` (if any) with "<file>: ".
llvm::Error prefixError(llvm::StringRef file, llvm::Error err);

//===----------------------------------------------------------------------===//
// Reading files that cannot hang or exhaust the machine
//
// Every file the compiler side reads (checkpoints, configs, tokenizers,
// calibration files, texts, manifests) goes through these helpers: it must
// be a regular file (a FIFO, device, socket or directory is refused before
// anything could block on it) and whole-file reads are bounded by a limit
// that fits the format.
//===----------------------------------------------------------------------===//

/// Size limits for files read whole (README.md, "Hostile inputs").
constexpr uint64_t kMaxJsonConfigBytes = uint64_t(16) << 20; ///< config.json &c.
constexpr uint64_t kMaxTokenizerBytes = uint64_t(64) << 20;  ///< tokenizer files
constexpr uint64_t kMaxTextBytes = uint64_t(256) << 20;      ///< --text inputs
constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t(100) << 20;
/// Deepest JSON nesting accepted (llvm::json::parse recurses per level).
constexpr unsigned kMaxJsonDepth = 256;

/// Checks that `path` names a regular file (symlinks are followed) without
/// opening it, so a FIFO cannot block. The error is "<path>: is a FIFO (named
/// pipe), expected <what>" (or a directory, a character device, ...), or
/// "<path>: cannot open: <reason>". `what` has its article: "a GGUF file".
llvm::Error checkRegularFile(llvm::StringRef path, llvm::StringRef what);

/// Opens `path` for reading without blocking (O_NONBLOCK: a FIFO cannot
/// hang) and checks with fstat that it is a regular file of at most
/// `maxBytes`; on success returns the descriptor (the caller closes it) and
/// sets `size`. Errors as checkRegularFile, plus "<path>: is N bytes, more
/// than the limit of M for <what>".
llvm::Expected<int> openRegularFile(llvm::StringRef path, llvm::StringRef what,
                                    uint64_t maxBytes, uint64_t &size);

/// Reads the whole regular file `path` (at most `maxBytes`) through
/// openRegularFile; large files are memory-mapped.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
readRegularFile(llvm::StringRef path, uint64_t maxBytes, llvm::StringRef what);

/// Rejects JSON nested deeper than `maxDepth` arrays/objects with "<file>:
/// JSON nested deeper than N at offset K" (K = `baseOffset` + the offset in
/// `text`). A linear scan that skips strings; run it before llvm::json::parse,
/// which recurses once per level and would overflow the stack.
llvm::Error checkJsonDepth(llvm::StringRef text, llvm::StringRef file,
                           uint64_t baseOffset = 0,
                           unsigned maxDepth = kMaxJsonDepth);

/// Reads (readRegularFile, at most `maxBytes`), depth-checks and parses the
/// JSON file `path`; a syntax error is "<path>: invalid JSON: <reason>".
llvm::Expected<llvm::json::Value> readJsonFile(llvm::StringRef path,
                                               uint64_t maxBytes,
                                               llvm::StringRef what);

/// Size of the regular file at `path` (checkRegularFile, then stat), or an
/// error naming it; `what` says what it should be ("a checkpoint file").
llvm::Expected<uint64_t> getFileSize(llvm::StringRef path,
                                     llvm::StringRef what = "a regular file");

/// Reads `size` bytes at `offset` of `path` into `out` (pread-like).
llvm::Error readFileRange(llvm::StringRef path, uint64_t offset,
                          llvm::MutableArrayRef<char> out,
                          llvm::StringRef what);

/// Little-endian reader over an in-memory byte range that never reads past
/// the end. Offsets in messages are absolute file offsets.
class ByteReader {
public:
  ByteReader(llvm::StringRef file, llvm::StringRef data, uint64_t base = 0)
      : file(file), data(data), base(base) {}

  uint64_t offset() const { return base + pos; }
  uint64_t remaining() const { return data.size() - pos; }
  llvm::StringRef fileName() const { return file; }

  llvm::Error readU8(uint8_t &v, const llvm::Twine &what);
  llvm::Error readU16(uint16_t &v, const llvm::Twine &what);
  llvm::Error readU32(uint32_t &v, const llvm::Twine &what);
  llvm::Error readU64(uint64_t &v, const llvm::Twine &what);
  llvm::Error readI32(int32_t &v, const llvm::Twine &what);
  llvm::Error readF32(float &v, const llvm::Twine &what);
  llvm::Error readF64(double &v, const llvm::Twine &what);
  llvm::Error readBytes(uint64_t n, llvm::StringRef &out,
                        const llvm::Twine &what);
  llvm::Error skip(uint64_t n, const llvm::Twine &what);

  /// Error "<file>: <msg> at offset N".
  llvm::Error error(const llvm::Twine &msg) const;

private:
  llvm::Error need(uint64_t n, const llvm::Twine &what);

  std::string file;
  llvm::StringRef data;
  uint64_t base;
  uint64_t pos = 0;
};

/// Unsigned arithmetic that reports overflow (returns true on overflow).
inline bool mulOverflow(uint64_t a, uint64_t b, uint64_t &r) {
  return __builtin_mul_overflow(a, b, &r);
}
inline bool addOverflow(uint64_t a, uint64_t b, uint64_t &r) {
  return __builtin_add_overflow(a, b, &r);
}

/// "[a, b]".
std::string formatShape(llvm::ArrayRef<int64_t> shape);

/// Product of `shape`, or std::nullopt on a negative dim or overflow.
std::optional<uint64_t> numElements(llvm::ArrayRef<int64_t> shape);

/// Bytes taken by `numel` elements of `storage` (Q8_0, Q4_0: numel % 32 == 0).
std::optional<uint64_t> storageBytes(StorageType storage, uint64_t numel);

/// Checks no size exceeds what any real model has (a corrupted header
/// otherwise overflows the shape arithmetic); the error names the field and
/// its limit. Part of checkConfig().
llvm::Error checkLimits(const LlamaConfig &config, llvm::StringRef file);

/// Checks the hyper-parameters are sane; errors name `file`.
llvm::Error checkConfig(const LlamaConfig &config, llvm::StringRef file);

/// Error "<file>: holds tensor '<name>' of layer N, but <layersField> is L"
/// when a tensor name `<layerPrefix>N.…` has N >= numLayers: a config that
/// claims fewer layers than the checkpoint stores would otherwise drop the
/// rest silently and generate garbage. The message names the smallest such
/// layer (deterministic whatever the order of `names`).
llvm::Error checkNoExtraLayers(llvm::StringRef file,
                               llvm::ArrayRef<llvm::StringRef> names,
                               llvm::StringRef layerPrefix, int64_t numLayers,
                               llvm::StringRef layersField);

/// Error "<file>: <tensor>: shape [..] but the config implies [..]" when the
/// shapes differ.
llvm::Error checkShape(llvm::StringRef file, llvm::StringRef tensor,
                       llvm::ArrayRef<int64_t> actual,
                       llvm::ArrayRef<int64_t> expected);

/// IEEE binary16 / bfloat16 to binary32.
float halfToFloat(uint16_t h);
float bf16ToFloat(uint16_t h);

/// Returns true if `piece` is spelled "<0xXX>" (two hex digits).
bool isBytePiece(llvm::StringRef piece);

/// `piece` in single quotes, non-printable bytes as \XX escapes.
std::string quotePiece(llvm::StringRef piece);

/// Checks that `tok` is a valid Kiln tokenizer, the same rules the runtime's
/// loader applies (docs/artifact.md, "Validity"): pieces, scores and types
/// agree in length; model is "spm", "bpe" or "byte_bpe"; every score is finite; every
/// type is 1..6; bos and eos ids are in range, unk is in range or -1; a "bpe"
/// tokenizer's merges are "left right" with both halves and their
/// concatenation in the vocabulary (an "spm" one has none); a "byte_bpe"
/// one, in addition, has a normal piece for each of the 256 GPT-2 byte
/// symbols and pre-tokenizer patterns PCRE2 compiles. Errors name
/// `file`, the token id or merge rank and the piece.
llvm::Error checkTokenizer(const TokenizerDesc &tok, llvm::StringRef file);

/// The PCRE2 patterns of the byte-level BPE pre-tokenizer that llama.cpp
/// calls `name` in `tokenizer.ggml.pre` ("gpt2"/"gpt-2", "smollm",
/// "llama-bpe"/"llama3"/"llama-v3", "qwen2", "default"), applied in order as
/// Hugging Face Split(Isolated); std::nullopt for other names
/// (PreTokenizers.cpp).
std::optional<std::vector<std::string>>
ggufPreTokenizerRegexes(llvm::StringRef name);
/// GPT-2's pre-tokenizer pattern (Hugging Face ByteLevel use_regex).
llvm::StringRef gpt2Pattern();
/// The UTF-8 spelling of `byte` in GPT-2's byte-to-unicode alphabet.
std::string gpt2ByteSymbol(uint8_t byte);
/// Compiles `pattern` as the runtime does (PCRE2, UTF + UCP); an error names
/// `file`, the pattern's `index`, PCRE2's message and the offset.
llvm::Error checkPreTokenizerRegex(llvm::StringRef pattern, size_t index,
                                   llvm::StringRef file);

/// Rejects user-defined pieces (type 4): SentencePiece and llama.cpp match
/// them in the text before merging, which Kiln's encoder does not do.
/// Called by the readers of source formats (not for synthetic vocabularies).
llvm::Error rejectUserDefinedPieces(const TokenizerDesc &tok,
                                    llvm::StringRef file);

/// Makes `tok` (read from `tokFile`) agree with the model's `vocabSize`:
/// more pieces than vocab_size is an error ("tokenizer FILE has N pieces but
/// the model's vocab_size is V"), and so are fewer unless `allowPadding`, in
/// which case ids [pieces, vocabSize) get control pieces "<pad_ID>" (type 3,
/// score 0) that the encoder never produces and that decode to nothing.
llvm::Error fitTokenizer(TokenizerDesc &tok, llvm::StringRef tokFile,
                         int64_t vocabSize, bool allowPadding);

/// Returns the path of `name` in `dir`.
std::string joinPath(llvm::StringRef dir, llvm::StringRef name);

/// Largest chat template accepted (real ones are a few KiB).
constexpr uint64_t kMaxChatTemplateBytes = uint64_t(1) << 20;

/// Sets model.chat.tmpl from `text` (read from `source`): an error if it is
/// larger than kMaxChatTemplateBytes; a note (kept in model.notes) if Kiln's
/// renderer cannot parse it, naming the line and column, since kiln-run
/// --chat then needs --chat-template FILE.
llvm::Error setChatTemplate(ModelDesc &model, std::string text,
                            llvm::StringRef source);

/// Appends `id` to model.chat.endOfTurnIds unless present; an error naming
/// `field` of `file` if it is outside [0, vocab).
llvm::Error addEndOfTurnId(ModelDesc &model, int64_t id, int64_t vocab,
                           llvm::StringRef file, llvm::StringRef field);

} // namespace mlir::kiln::detail

#endif // KILN_DIALECTS_KILN_IMPORT_IMPORTUTILS_H
