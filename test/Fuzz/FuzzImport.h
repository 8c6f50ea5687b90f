//===- FuzzImport.h - Helpers of the importer fuzz targets ------*- C++ -*-===//
//
// What the importer targets do with a model or tokenizer they managed to
// import: decode every (small enough) weight the way the artifact writer
// would, and, with KILN_FUZZ_STRICT=1 in the environment, check that the
// runtime accepts every tokenizer the importers accept (the compile-time
// checks must be at least as strict as the runtime's).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TEST_FUZZ_FUZZIMPORT_H
#define KILN_TEST_FUZZ_FUZZIMPORT_H

#include "dialects/Kiln/Import/ModelDesc.h"

namespace kiln::fuzz {

/// Decodes the weights of `model` (plain ones with materializeWeight,
/// pre-quantized ones with materializeRepacked) while the total stays under
/// a quarter million elements; errors are dropped.
void materializeWeights(const mlir::kiln::ModelDesc &model);

/// With KILN_FUZZ_STRICT=1: aborts, printing both messages, when the
/// artifact's tokenizer.json written for `tok` is refused by the runtime's
/// tokenizer. Otherwise does nothing.
void checkRuntimeAccepts(const mlir::kiln::TokenizerDesc &tok);

} // namespace kiln::fuzz

#endif // KILN_TEST_FUZZ_FUZZIMPORT_H
