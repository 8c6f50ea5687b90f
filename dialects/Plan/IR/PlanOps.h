//===- PlanOps.h - plan dialect ---------------------------------*- C++ -*-===//

#ifndef KILN_DIALECTS_PLAN_IR_PLANOPS_H
#define KILN_DIALECTS_PLAN_IR_PLANOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "dialects/Plan/IR/PlanDialect.h.inc"

#define GET_OP_CLASSES
#include "dialects/Plan/IR/PlanOps.h.inc"

#endif // KILN_DIALECTS_PLAN_IR_PLANOPS_H
