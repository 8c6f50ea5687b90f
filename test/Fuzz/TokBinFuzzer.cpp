//===- TokBinFuzzer.cpp - libFuzzer target: llama2.c tok*.bin -------------===//
//
// Input: a llama2.c tokenizer file (tokenizer.bin / tok*.bin), read with
// readLlama2cTokenizer(). With KILN_FUZZ_STRICT=1, what it accepts must be
// accepted by the runtime tokenizer too.
//
//===----------------------------------------------------------------------===//

#include "FuzzImport.h"
#include "FuzzUtils.h"

#include "dialects/Kiln/Import/Importers.h"

using namespace mlir::kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln::fuzz::ScratchDir &dir = kiln::fuzz::ScratchDir::get();
  dir.clear();
  std::string path = dir.write(
      "tok.bin", std::string_view(reinterpret_cast<const char *>(data), size));
  if (llvm::Expected<TokenizerDesc> tok = readLlama2cTokenizer(path))
    kiln::fuzz::checkRuntimeAccepts(*tok);
  else
    llvm::consumeError(tok.takeError());
  return 0;
}
