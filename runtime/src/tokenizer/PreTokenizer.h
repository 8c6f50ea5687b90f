//===- PreTokenizer.h - Regex pre-tokenizer and GPT-2 byte alphabet -*- C++ -*-//
//
// The pieces of a byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2, SmolLM2)
// that come before and after the merges:
//
//  * RegexSplitter: a sequence of regular expressions, each splitting every
//    piece the previous ones produced into matches and the text between
//    them, both kept in order (Hugging Face tokenizers' `Split` pre-tokenizer
//    with behavior `Isolated`, `invert` false; llama.cpp's
//    unicode_regex_split). The patterns are compiled by PCRE2 in UTF + UCP
//    mode (\p{L}, \p{N}, \s are Unicode properties), with JIT where
//    available. Invalid UTF-8 in the text never matches; it stays in the
//    pieces between matches.
//  * byteToUnicode / unicodeToByte: GPT-2's reversible map of the 256 byte
//    values to printable code points (Radford et al. 2019, openai/gpt-2
//    encoder.py bytes_to_unicode): bytes '!'..'~', 0xA1..0xAC, 0xAE..0xFF
//    map to the same code point, the other 68 to U+0100.. in byte order.
//
// Plain C++17 + libpcre2-8; no LLVM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_TOKENIZER_PRETOKENIZER_H
#define KILN_RUNTIME_SRC_TOKENIZER_PRETOKENIZER_H

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::rt {

/// Splits text by a sequence of PCRE2 patterns (see the file comment).
/// Immutable after create(); split() is thread-safe.
class RegexSplitter {
public:
  /// Compiles `patterns` (PCRE2 syntax, UTF + UCP). On failure returns false
  /// and sets `error` to "pattern N: <PCRE2 message> at offset K".
  static bool create(const std::vector<std::string> &patterns,
                     std::shared_ptr<const RegexSplitter> &out,
                     std::string &error);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter &) = delete;
  RegexSplitter &operator=(const RegexSplitter &) = delete;

  /// Appends to `out` the (offset, length) byte ranges of `text` that the
  /// patterns split it into, in order, covering `text` exactly (no empty
  /// ranges). With no patterns, the whole text is one range.
  void split(std::string_view text,
             std::vector<std::pair<size_t, size_t>> &out) const;

private:
  RegexSplitter() = default;
  void splitOne(size_t pattern, std::string_view text, size_t base,
                std::vector<std::pair<size_t, size_t>> &out) const;
  std::vector<void *> codes_; // pcre2_code_8 *
};

/// The GPT-2 byte-to-unicode code point of `byte`.
uint32_t byteToUnicode(uint8_t byte);
/// The byte whose GPT-2 code point is `codePoint`, or -1 if none.
int unicodeToByte(uint32_t codePoint);
/// Appends the UTF-8 encoding of `codePoint` (< 0x110000) to `out`.
void appendUtf8(uint32_t codePoint, std::string &out);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_TOKENIZER_PRETOKENIZER_H
