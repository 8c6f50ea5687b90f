//===- Llama2cFuzzer.cpp - libFuzzer target: llama2.c importer ------------===//
//
// Input: parts separated by kPartSeparator (FuzzUtils.h): 0 the checkpoint
// (.bin), 1 its tok*.bin (when empty, none is written and the importer
// looks for one beside the checkpoint and finds none). Runs importLlama2c()
// and decodes the weights of what imports.
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
  std::string model = dir.write("model.bin", parts[0]);
  std::string tok;
  if (!parts[1].empty())
    tok = dir.write("tok.bin", parts[1]);
  if (llvm::Expected<ModelDesc> desc = importLlama2c(model, tok))
    kiln::fuzz::materializeWeights(*desc);
  else
    llvm::consumeError(desc.takeError());
  return 0;
}
