//===- TokenizerFuzzer.cpp - libFuzzer target: runtime tokenizer ----------===//
//
// The runtime tokenizer (runtime/src/tokenizer) on arbitrary bytes. At start
// the real tokenizers of ../shared/models (or $KILN_FUZZ_MODELS) are
// imported, written as artifact tokenizer.json and loaded as the runtime
// does: stories260K tok512.bin (SentencePiece, 512), the Llama 2 vocabulary
// (SentencePiece, 32000), TinyStories-656K tokenizer.json (BPE by rank,
// 2048), SmolLM2's GGUF vocabulary (byte-level BPE with the smollm regex
// pre-tokenizer and special tokens, 49152), plus a synthetic one
// (always there, so the target works without the models).
//
// Input: first byte 'J': the rest is a kiln tokenizer.json, parsed with
// Tokenizer::parse() and, if valid, used to encode and decode a fixed text.
// Any other first byte b picks tokenizer b % N; the rest is text to encode
// (with BOS when b & 0x80) and decode back, then read as little-endian
// int32 ids to decode (invalid ids included). Encoded ids must be valid.
//
// With KILN_FUZZ_WRITE_SEEDS=DIR, the loaded tokenizers' tokenizer.json
// texts are written to DIR/<name>.json at start (scripts/fuzz.sh uses them
// as seeds).
//
//===----------------------------------------------------------------------===//

#include "FuzzUtils.h"

#include "codegen/Artifact/TokenizerWriter.h"
#include "dialects/Kiln/Import/Importers.h"
#include "tokenizer/Tokenizer.h"

#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <fstream>

using kiln::rt::Tokenizer;
using kiln::rt::TokenizerStatus;

#ifndef KILN_SHARED_DIR
#define KILN_SHARED_DIR "../shared"
#endif

namespace {
struct Loaded {
  std::string name;
  Tokenizer tok;
};
} // namespace

static std::vector<Loaded> &tokenizers() {
  static std::vector<Loaded> all;
  return all;
}

static void add(const std::string &name,
                llvm::Expected<mlir::kiln::TokenizerDesc> desc) {
  if (!desc) {
    std::fprintf(stderr, "fuzz tokenizer %s skipped: %s\n", name.c_str(),
                 llvm::toString(desc.takeError()).c_str());
    return;
  }
  llvm::Expected<llvm::json::Value> doc = mlir::kiln::tokenizerToJson(*desc);
  if (!doc) {
    std::fprintf(stderr, "fuzz tokenizer %s skipped: %s\n", name.c_str(),
                 llvm::toString(doc.takeError()).c_str());
    return;
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *doc;
  os.flush();
  Loaded l{name, Tokenizer()};
  TokenizerStatus st = Tokenizer::parse(text, name, l.tok);
  if (!st.ok) {
    std::fprintf(stderr, "fuzz tokenizer %s skipped: %s\n", name.c_str(),
                 st.message.c_str());
    return;
  }
  if (const char *seeds = std::getenv("KILN_FUZZ_WRITE_SEEDS")) {
    std::ofstream out(std::string(seeds) + "/" + name + ".json",
                      std::ios::binary);
    out << 'J' << text;
  }
  tokenizers().push_back(std::move(l));
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  std::string models = std::getenv("KILN_FUZZ_MODELS")
                           ? std::getenv("KILN_FUZZ_MODELS")
                           : KILN_SHARED_DIR "/models";
  add("synthetic", mlir::kiln::makeSyntheticTokenizer(300));
  add("stories260k", mlir::kiln::readLlama2cTokenizer(
                         models + "/stories260K/tok512.bin"));
  add("llama2", mlir::kiln::readSentencePieceModel(
                    models + "/llama2-tokenizer/tokenizer.model"));
  add("tinystories656k", mlir::kiln::readHfTokenizer(
                             models + "/tinystories-656k/hf/tokenizer.json"));
  add("smollm2", mlir::kiln::readGgufTokenizer(
                     models +
                     "/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf"));
  return 0;
}

static void exercise(const Tokenizer &tok, std::string_view text, bool bos) {
  std::vector<int32_t> ids = tok.encode(text, bos);
  for (int32_t id : ids)
    if (!tok.isValid(id)) {
      std::fprintf(stderr, "encode produced invalid id %d (vocab %d)\n", id,
                   tok.vocabSize());
      std::abort();
    }
  (void)tok.decode(ids);
  std::vector<int32_t> raw(text.size() / 4);
  if (!raw.empty())
    std::memcpy(raw.data(), text.data(), raw.size() * 4);
  (void)tok.decode(raw, raw.empty() ? -1 : raw[0]);
  for (size_t i = 0; i + 1 < raw.size(); ++i)
    (void)tok.decodePiece(raw[i], raw[i + 1]);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  std::string_view rest(reinterpret_cast<const char *>(data) + 1, size - 1);
  if (data[0] == 'J') {
    Tokenizer tok;
    if (Tokenizer::parse(rest, "<fuzz>", tok).ok)
      exercise(tok, "Once upon a time, \xe2\x96\x81<s> \xf0\x9f\x99\x82 \xff!",
               true);
    return 0;
  }
  const std::vector<Loaded> &all = tokenizers();
  if (all.empty())
    return 0;
  exercise(all[data[0] % all.size()].tok, rest, data[0] & 0x80);
  return 0;
}
