//===- WeightDump.cpp - kiln-weight-dump: decoded weights of a GGUF -------===//
//
// Test utility (not installed): imports a GGUF file with Kiln's importer and
// writes every weight tensor it reads, decoded to float32 by the same code
// the artifact writer uses (materializeWeight: kiln_rt/block_formats.h for
// the GGML block formats), as OUTDIR/<gguf tensor name>.f32 (raw
// little-endian float32, row-major, the GGUF shape reversed: [ne1, ne0]).
// Linears kept quantized are decoded from their source tensor alone. The
// dequantization test (test/Import/gguf-block-formats.test) compares these
// files with gguf-py's gguf.quants.dequantize block by block.
//
//   kiln-weight-dump MODEL.gguf OUTDIR
//
// Exit 1 with the importer's message on any error.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/ModelDesc.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <vector>

using namespace mlir::kiln;

int main(int argc, char **argv) {
  if (argc != 3) {
    llvm::errs() << "usage: kiln-weight-dump MODEL.gguf OUTDIR\n";
    return 2;
  }
  llvm::Expected<ModelDesc> model = importGguf(argv[1]);
  if (!model) {
    llvm::errs() << "kiln-weight-dump: error: "
                 << llvm::toString(model.takeError()) << "\n";
    return 1;
  }
  int written = 0;
  for (const WeightDesc &w : model->weights) {
    // Decode the checkpoint tensor itself, without the recipe's later steps.
    WeightDesc plain;
    plain.name = w.name;
    plain.source = w.source;
    uint64_t n = 1;
    for (int64_t d : plain.source.shape)
      n *= uint64_t(d);
    std::vector<float> data(n);
    if (llvm::Error e = materializeWeight(plain, data)) {
      llvm::errs() << "kiln-weight-dump: error: " << llvm::toString(std::move(e))
                   << "\n";
      return 1;
    }
    llvm::SmallString<256> path(argv[2]);
    llvm::sys::path::append(path, plain.source.tensor + ".f32");
    std::error_code ec;
    llvm::raw_fd_ostream os(path, ec);
    if (ec) {
      llvm::errs() << "kiln-weight-dump: error: " << path << ": "
                   << ec.message() << "\n";
      return 1;
    }
    os.write(reinterpret_cast<const char *>(data.data()), n * sizeof(float));
    llvm::outs() << plain.source.tensor << " "
                 << stringifyStorageType(plain.source.storage) << " " << n
                 << "\n";
    ++written;
  }
  llvm::outs() << "dumped " << written << " tensors\n";
  return 0;
}
