//===- HfFuzzer.cpp - libFuzzer target: Hugging Face importer -------------===//
//
// Input: parts separated by kPartSeparator (FuzzUtils.h):
//   0 config.json
//   1 the safetensors header JSON; written as an 8-byte little-endian
//     length, this text, then part 2. A part 1 that does not start with '{'
//     is written verbatim instead (a whole safetensors file, length included)
//   2 the safetensors data bytes
//   3 model.safetensors.index.json; when not empty, the safetensors file is
//     named model-00001-of-00001.safetensors instead of model.safetensors
//   4 tokenizer.json (not written when empty)
//   5 tokenizer_config.json (not written when empty)
// Runs importHuggingFace() on the directory and decodes what imports.
//
//===----------------------------------------------------------------------===//

#include "FuzzImport.h"
#include "FuzzUtils.h"

#include "dialects/Kiln/Import/Importers.h"

using namespace mlir::kiln;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string_view> parts = kiln::fuzz::splitParts(data, size, 6);
  kiln::fuzz::ScratchDir &dir = kiln::fuzz::ScratchDir::get();
  dir.clear();
  dir.write("config.json", parts[0]);
  std::string tensors;
  if (!parts[1].empty() && parts[1][0] == '{') {
    uint64_t len = parts[1].size();
    for (int i = 0; i < 8; ++i)
      tensors.push_back(char((len >> (8 * i)) & 0xff));
  }
  tensors.append(parts[1]);
  tensors.append(parts[2]);
  if (parts[3].empty()) {
    dir.write("model.safetensors", tensors);
  } else {
    dir.write("model.safetensors.index.json", parts[3]);
    dir.write("model-00001-of-00001.safetensors", tensors);
  }
  if (!parts[4].empty())
    dir.write("tokenizer.json", parts[4]);
  if (!parts[5].empty())
    dir.write("tokenizer_config.json", parts[5]);
  if (llvm::Expected<ModelDesc> model = importHuggingFace(dir.path()))
    kiln::fuzz::materializeWeights(*model);
  else
    llvm::consumeError(model.takeError());
  return 0;
}
