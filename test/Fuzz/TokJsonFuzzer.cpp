//===- TokJsonFuzzer.cpp - libFuzzer target: HF tokenizer.json ------------===//
//
// Input: parts separated by kPartSeparator (FuzzUtils.h): 0 a Hugging Face
// tokenizer.json, 1 the tokenizer_config.json beside it (not written when
// empty). Read with readHfTokenizer(). With KILN_FUZZ_STRICT=1, what it
// accepts must be accepted by the runtime tokenizer too.
//
//===----------------------------------------------------------------------===//

#include "FuzzImport.h"
#include "FuzzUtils.h"

#include "dialects/Kiln/Import/Importers.h"

using namespace mlir::kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string_view> parts = kiln::fuzz::splitParts(data, size, 2);
  kiln::fuzz::ScratchDir &dir = kiln::fuzz::ScratchDir::get();
  dir.clear();
  std::string path = dir.write("tokenizer.json", parts[0]);
  if (!parts[1].empty())
    dir.write("tokenizer_config.json", parts[1]);
  if (llvm::Expected<TokenizerDesc> tok = readHfTokenizer(path))
    kiln::fuzz::checkRuntimeAccepts(*tok);
  else
    llvm::consumeError(tok.takeError());
  return 0;
}
