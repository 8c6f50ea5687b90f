//===- ImportTestUtils.h - Helpers for the importer unit tests --*- C++ -*-===//

#ifndef KILN_TEST_UNIT_IMPORT_IMPORTTESTUTILS_H
#define KILN_TEST_UNIT_IMPORT_IMPORTTESTUTILS_H

#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace kiln::test {

/// ${KILN_SHARED_DIR}/models/<rel>.
std::string modelPath(llvm::StringRef rel);

/// True if the shared model files are present.
bool haveModels();

/// A temporary directory removed (with its files) on destruction.
class TempDir {
public:
  TempDir();
  ~TempDir();
  std::string path(llvm::StringRef name) const;
  const std::string &root() const { return dir; }

private:
  std::string dir;
};

std::string readFileBytes(llvm::StringRef path);
void writeFileBytes(llvm::StringRef path, llvm::StringRef bytes);

/// The message of `e`, or "" on success (consumes it).
std::string errorMessage(llvm::Error e);
template <typename T> std::string errorMessage(llvm::Expected<T> &e) {
  if (e)
    return "";
  return errorMessage(e.takeError());
}

/// Materializes `w` into a fresh vector (fails the test on error).
std::vector<float> materialize(const mlir::kiln::WeightDesc &w);

/// SentencePiece-style encoder over a TokenizerDesc (spm: merge by score,
/// leftmost on ties), mirroring llama2.c run.c, for checking tokenizers.
std::vector<int> encodeSpm(const mlir::kiln::TokenizerDesc &tok,
                           llvm::StringRef text);

/// Hugging Face BPE encoder (merge the adjacent pair of lowest rank,
/// leftmost on ties) over a TokenizerDesc with merges.
std::vector<int> encodeBpe(const mlir::kiln::TokenizerDesc &tok,
                           llvm::StringRef text);

} // namespace kiln::test

#define KILN_REQUIRE_MODELS()                                                  \
  do {                                                                         \
    if (!::kiln::test::haveModels())                                           \
      GTEST_SKIP() << "shared models not found at " KILN_SHARED_DIR;          \
  } while (0)

#endif // KILN_TEST_UNIT_IMPORT_IMPORTTESTUTILS_H
