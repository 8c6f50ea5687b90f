//===- KilnDialect.h - kiln dialect -----------------------------*- C++ -*-===//

#ifndef KILN_DIALECTS_KILN_IR_KILNDIALECT_H
#define KILN_DIALECTS_KILN_IR_KILNDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "dialects/Kiln/IR/KilnDialect.h.inc"

#endif // KILN_DIALECTS_KILN_IR_KILNDIALECT_H
