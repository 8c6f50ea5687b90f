// kiln-fuse on the tiny Llama: every family, each switch alone, the report,
// and the fused graph still planning, lowering and emitting.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-fuse | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-fuse | kiln-opt --kiln-verify | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse{report=true})" -o /dev/null 2>&1 | FileCheck %s --check-prefix=REPORT
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse{families=horizontal})" | FileCheck %s --check-prefix=HORIZ
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse{families=prologue})" | FileCheck %s --check-prefix=PRO
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse{families=epilogue})" | FileCheck %s --check-prefix=EPI
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse{families=none})" | FileCheck %s --check-prefix=NONE
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-fuse,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize)" | FileCheck %s --check-prefix=PLAN

// Horizontal: Q, K and V become one weight whose recipe is wq's followed by
// concat_rows of wk and wv (each with its own source); gate and up too. The
// original weights are gone.
// CHECK-NOT: kiln.weight @layers.0.wq :
// CHECK: kiln.weight @"layers.0.wq+wk+wv" : tensor<32x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wq", {{.*}}transforms = [#kiln.transform<"concat_rows", {parts = [{source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wk", {{.*}}type = tensor<8x16xf32>}, {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wv", {{.*}}type = tensor<8x16xf32>}]}>]}
// CHECK: kiln.weight @"layers.0.w1+w3" : tensor<48x16xf32>
// CHECK-LABEL: func.func @prefill
// The attention norm is the prologue of the QKV linear; the slices route the
// three column ranges to their own results, RoPE applied to Q and K on the
// way (the position is an operand of the region).
// CHECK: %[[QKV:.*]]:3 = kiln.fused(%{{.*}}, %{{.*}}, %{{.*}}, %arg1) attributes {families = ["horizontal", "prologue", "epilogue"]} {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<?x16xf32>, %[[NW:.*]]: tensor<16xf32>, %[[W:.*]]: tensor<32x16xf32>, %[[POS:.*]]: index):
// CHECK-NEXT: %[[N:.*]] = kiln.rms_norm %[[X]], %[[NW]]
// CHECK-NEXT: %[[L:.*]] = kiln.linear %[[N]], %[[W]] : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<?x32xf32>
// CHECK-NEXT: %[[Q:.*]] = kiln.slice_columns %[[L]] {offset = 0 : i64} : tensor<?x32xf32> -> tensor<?x16xf32>
// CHECK-NEXT: %[[K:.*]] = kiln.slice_columns %[[L]] {offset = 16 : i64} : tensor<?x32xf32> -> tensor<?x8xf32>
// CHECK-NEXT: %[[V:.*]] = kiln.slice_columns %[[L]] {offset = 24 : i64} : tensor<?x32xf32> -> tensor<?x8xf32>
// CHECK-NEXT: %[[QR:.*]] = kiln.rope %[[Q]], %[[POS]]
// CHECK-NEXT: %[[KR:.*]] = kiln.rope %[[K]], %[[POS]]
// CHECK-NEXT: kiln.yield %[[V]], %[[QR]], %[[KR]]
// The attention reads the region's results.
// CHECK: kiln.attention %[[QKV]]#1, %[[QKV]]#2, %[[QKV]]#0
// Epilogue: the residual add joins the output projection.
// CHECK: kiln.fused({{.*}}) attributes {families = ["epilogue"]} {
// CHECK: kiln.linear
// CHECK-NEXT: kiln.add
// CHECK-NEXT: kiln.yield
// Gate and up with the FFN norm as prologue and SwiGLU as epilogue.
// CHECK: kiln.fused({{.*}}) attributes {families = ["horizontal", "prologue", "epilogue"]} {
// CHECK: kiln.rms_norm
// CHECK-NEXT: kiln.linear {{.*}} -> tensor<?x48xf32>
// CHECK-NEXT: %[[G:.*]] = kiln.slice_columns {{.*}}offset = 0
// CHECK-NEXT: %[[U:.*]] = kiln.slice_columns {{.*}}offset = 24
// CHECK-NEXT: %[[S:.*]] = kiln.swiglu %[[G]], %[[U]]
// CHECK-NEXT: kiln.yield %[[S]]
// CHECK: kiln.fused({{.*}}) attributes {families = ["epilogue"]} {
// CHECK: kiln.linear
// CHECK-NEXT: kiln.add
// The final norm feeds the classifier, which is not a fusable linear.
// CHECK: kiln.rms_norm
// CHECK: kiln.logits
// CHECK-LABEL: func.func @decode
// CHECK-COUNT-4: kiln.fused

// REPORT: remark: kiln-fuse 'prefill': kernel ops 18 -> 8; regions with horizontal 2, prologue 2, epilogue 4, elementwise 0
// REPORT: remark: kiln-fuse 'decode': kernel ops 18 -> 8; regions with horizontal 2, prologue 2, epilogue 4, elementwise 0

// Horizontal alone: concatenated weights, and the slices stay with the fused
// linear in its region (families horizontal); RoPE stays outside.
// HORIZ-LABEL: func.func @prefill
// HORIZ: kiln.fused({{.*}}) attributes {families = ["horizontal"]}
// HORIZ: kiln.slice_columns
// HORIZ: kiln.yield
// HORIZ: kiln.rope
// HORIZ: kiln.add
// HORIZ: kiln.fused({{.*}}) attributes {families = ["horizontal"]}
// HORIZ: kiln.swiglu

// Prologue alone: one region per projection that reads a norm alone (none:
// wq, wk and wv share it), so nothing is fused in this graph.
// PRO-NOT: kiln.fused

// Epilogue alone: the residual adds and the SwiGLU of the separate up
// projection (which reads the gate computed before it).
// EPI-LABEL: func.func @prefill
// EPI-NOT: concat_rows
// EPI: kiln.fused({{.*}}) attributes {families = ["epilogue"]}
// EPI: kiln.add
// EPI: kiln.linear
// EPI: kiln.fused({{.*}}) attributes {families = ["epilogue"]}
// EPI: kiln.linear
// EPI-NEXT: kiln.swiglu
// EPI: kiln.fused({{.*}}) attributes {families = ["epilogue"]}
// EPI: kiln.add

// NONE-NOT: kiln.fused
// NONE-NOT: concat_rows

// The fused regions become generated kernels called with their buffers.
// PLAN: plan.call_fused @kiln_fused_prefill_0(%{{.*}}, %{{.*}}, %{{.*}}, %arg1, %{{.*}}, %{{.*}}, %{{.*}}, %arg0) : memref<?x16xf32>, memref<16xf32>, memref<32x16xf32>, index, memref<?x8xf32>, memref<?x16xf32>, memref<?x8xf32>, index
// PLAN: plan.fused_kernel @kiln_fused_prefill_0 families ["horizontal", "prologue", "epilogue"] {
// PLAN-NEXT: ^bb0(
// PLAN-NEXT: kiln.rms_norm
