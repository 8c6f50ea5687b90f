//===- PreTokenizers.cpp - Byte-level BPE pre-tokenizers ------------------===//
//
// The regex pre-tokenizers of byte-level BPE vocabularies, by the names
// llama.cpp writes to `tokenizer.ggml.pre`, spelled as Hugging Face
// tokenizers writes them in tokenizer.json (Split with behavior Isolated, or
// ByteLevel's built-in GPT-2 pattern), and the checks the runtime's loader
// applies to them (PCRE2, UTF + UCP, as runtime/src/tokenizer/
// PreTokenizer.cpp compiles them).
//
// Sources (read for the patterns, nothing copied): openai/gpt-2 encoder.py
// (GPT-2 pattern and byte alphabet), the tokenizer.json files of
// meta-llama/Meta-Llama-3-8B, Qwen/Qwen2-7B and HuggingFaceTB/SmolLM2 (Split
// and Digits pre-tokenizers), llama.cpp src/llama-vocab.cpp (which names
// select which patterns, and its "default" list).
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

using namespace llvm;

namespace mlir::kiln::detail {

/// GPT-2's pattern (Hugging Face ByteLevel with use_regex true).
static constexpr const char *kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|"
    "\\s+(?!\\S)|\\s+";
/// Llama 3's Split pattern: case-insensitive contractions, a letter run with
/// one leading non-letter, numbers of 1-3 digits.
static constexpr const char *kLlama3Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|"
    "\\s+";
/// Qwen2's Split pattern: Llama 3's with single digits.
static constexpr const char *kQwen2Pattern =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}|"
    " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

std::optional<std::vector<std::string>>
ggufPreTokenizerRegexes(StringRef name) {
  if (name == "gpt2" || name == "gpt-2")
    return std::vector<std::string>{kGpt2Pattern};
  // Hugging Face SmolLM2: Digits(individual_digits) then ByteLevel.
  if (name == "smollm")
    return std::vector<std::string>{"\\p{N}", kGpt2Pattern};
  if (name == "llama-bpe" || name == "llama3" || name == "llama-v3")
    return std::vector<std::string>{kLlama3Pattern};
  if (name == "qwen2")
    return std::vector<std::string>{kQwen2Pattern};
  // llama.cpp's fallback for vocabularies converted without a known
  // pre-tokenizer: punctuation runs, GPT-2 words, numbers, then digit
  // triples.
  if (name == "default")
    return std::vector<std::string>{"[\\p{P}\\$\\+<=>\\^~\\|]+", kGpt2Pattern,
                                    "\\p{N}+", "[0-9][0-9][0-9]"};
  return std::nullopt;
}

StringRef gpt2Pattern() { return kGpt2Pattern; }

std::string gpt2ByteSymbol(uint8_t byte) {
  auto selfMapped = [](unsigned b) {
    return (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
           (b >= 0xae && b <= 0xff);
  };
  unsigned cp = byte;
  if (!selfMapped(byte)) {
    cp = 256;
    for (unsigned b = 0; b < byte; ++b)
      cp += selfMapped(b) ? 0 : 1;
  }
  std::string out;
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
  return out;
}

Error checkPreTokenizerRegex(StringRef pattern, size_t index,
                             StringRef file) {
  int code = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code *re = pcre2_compile(
      reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
      PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &code, &offset,
      nullptr);
  if (re) {
    pcre2_code_free(re);
    return Error::success();
  }
  PCRE2_UCHAR message[256];
  pcre2_get_error_message(code, message, sizeof(message));
  return fileError(file, "pre-tokenizer pattern " + Twine(index) + " " +
                             quotePiece(pattern) + ": " +
                             reinterpret_cast<const char *>(message) +
                             " at offset " + Twine(offset));
}

} // namespace mlir::kiln::detail
