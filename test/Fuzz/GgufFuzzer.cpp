//===- GgufFuzzer.cpp - libFuzzer target: GGUF importer -------------------===//
//
// Input: a GGUF file. Runs importGguf() (metadata, tensor table, embedded
// tokenizer), decodes the weights of what imports, and reads the tokenizer
// alone with readGgufTokenizer().
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
      "model.gguf", std::string_view(reinterpret_cast<const char *>(data), size));
  if (llvm::Expected<ModelDesc> model = importGguf(path))
    kiln::fuzz::materializeWeights(*model);
  else
    llvm::consumeError(model.takeError());
  if (llvm::Expected<TokenizerDesc> tok = readGgufTokenizer(path))
    kiln::fuzz::checkRuntimeAccepts(*tok);
  else
    llvm::consumeError(tok.takeError());
  return 0;
}
