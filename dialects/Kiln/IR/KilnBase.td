//===- KilnBase.td - kiln dialect definition ---------------*- tablegen -*-===//
//
// The kiln graph dialect: tensor-level operations of a decoder-only
// transformer as the Llama papers draw them.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECTS_KILN_IR_KILNBASE_TD
#define KILN_DIALECTS_KILN_IR_KILNBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Kiln_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::mlir::kiln";
  let summary = "Tensor-level operations for transformer inference";
  let description = [{
    Operations at the level the Llama papers draw (embedding, rms_norm,
    linear, rope, attention with a KV cache, silu/swiglu, add, mul, logits)
    plus weight symbols that name where each weight lives and the pending
    transforms that produce it. No weight data is stored in the IR.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Kiln_Dialect, mnemonic, traits>;

#endif // KILN_DIALECTS_KILN_IR_KILNBASE_TD
