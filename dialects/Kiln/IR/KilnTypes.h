//===- KilnTypes.h - kiln dialect types and attributes ----------*- C++ -*-===//

#ifndef KILN_DIALECTS_KILN_IR_KILNTYPES_H
#define KILN_DIALECTS_KILN_IR_KILNTYPES_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Types.h"

#define GET_TYPEDEF_CLASSES
#include "dialects/Kiln/IR/KilnTypes.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/Kiln/IR/KilnAttrs.h.inc"

#endif // KILN_DIALECTS_KILN_IR_KILNTYPES_H
