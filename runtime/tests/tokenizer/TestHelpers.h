//===- TestHelpers.h - Reading shared model files for tokenizer tests -----===//
//
// Test-only readers that turn the source tokenizer formats in shared/models
// into TokenizerConfig (what the importers do for real), plus a naive
// transcription of llama2.c run.c's quadratic encoder used as a cross-check.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TESTS_TOKENIZER_TESTHELPERS_H
#define KILN_RUNTIME_TESTS_TOKENIZER_TESTHELPERS_H

#include "tokenizer/Tokenizer.h"

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace kiln::rt::test {

/// Absolute path of a file under shared/models.
std::string modelPath(const std::string &relative);

/// Whole file as bytes; fails the current test (ADD_FAILURE) if unreadable.
std::string readFile(const std::string &path);

nlohmann::json readJson(const std::string &path);

/// llama2.c tokenizer.bin / tok512.bin (int32 max_len, then per id: float
/// score, int32 len, bytes) in SentencePiece conventions: ' ' -> "▁", id 1
/// "<s>", id 2 "</s>", types unknown (0) / control (1, 2) / byte / normal.
TokenizerConfig readLlama2cTokenizer(const std::string &path);

/// Hugging Face tokenizer.json BPE model (vocab, merges, added_tokens) as the
/// "bpe" model; ids bos/eos/unk as given.
TokenizerConfig readHfBpeTokenizer(const std::string &path, int32_t bosId,
                                   int32_t eosId);

/// `config`, serialised as a Kiln tokenizer.json document.
nlohmann::json toKilnJson(const TokenizerConfig &config);

/// llama2.c run.c encode() transcribed literally (O(n^2) scan) over
/// `config`'s normal pieces; the reference the fast encoder must match.
std::vector<int32_t> naiveSpmEncode(const TokenizerConfig &config,
                                    const std::string &text, bool addBos);

/// Hugging Face BPE merging transcribed literally (O(n^2) scan: lowest rank,
/// leftmost on ties) over `config`, for text whose code points all have
/// pieces.
std::vector<int32_t> naiveBpeEncode(const TokenizerConfig &config,
                                    const std::string &text, bool addBos);

} // namespace kiln::rt::test

#endif // KILN_RUNTIME_TESTS_TOKENIZER_TESTHELPERS_H
