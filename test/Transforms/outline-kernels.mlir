// kiln-outline-kernels: every linear and elementwise op left outside a fused
// region becomes a single-op kiln.fused region (no fusion family), which the
// CPU codegen instantiates; the classifier is marked for kiln-lower-to-plan;
// norms, RoPE, attention and embeddings stay runtime kernels.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-outline-kernels | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-outline-kernels | kiln-opt --kiln-verify -o /dev/null
// A second run changes nothing.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-outline-kernels > %t.once.mlir
// RUN: kiln-opt %t.once.mlir --kiln-outline-kernels > %t.twice.mlir
// RUN: diff %t.once.mlir %t.twice.mlir
// After kiln-fuse only what the regions left is outlined.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-fuse --kiln-outline-kernels | FileCheck %s --check-prefix=FUSED
// Planned, lowered: one plan.fused_kernel per op, named after it, and the
// classifier a kiln_logits kernel reading the hidden rows and writing the
// entry point's logits.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize)" | FileCheck %s --check-prefix=PLAN
// 16-bit values and block, W8A16 and W4A16 weights are outlined; W8A8 is not.
// RUN: kiln-opt %s --kiln-outline-kernels | FileCheck %s --check-prefix=KINDS

// CHECK-LABEL: func.func @prefill
// CHECK: kiln.embedding
// CHECK: kiln.rms_norm
// CHECK: %[[Q:.*]] = kiln.fused(%{{.*}}, %{{.*}}) attributes {families = []} {
// CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<?x16xf32>, %[[W:.*]]: tensor<16x16xf32>):
// CHECK-NEXT: %[[L:.*]] = kiln.linear %[[X]], %[[W]]
// CHECK-NEXT: kiln.yield %[[L]]
// CHECK-NEXT: } : (tensor<?x16xf32>, tensor<16x16xf32>) -> tensor<?x16xf32>
// CHECK: kiln.fused
// CHECK: kiln.fused
// CHECK: kiln.rope %[[Q]]
// CHECK: kiln.attention
// CHECK: kiln.fused({{.*}}) attributes {families = []} {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.linear
// CHECK: kiln.fused({{.*}}) attributes {families = []} {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.add
// CHECK: ^bb0({{.*}}: tensor<?x24xf32>, {{.*}}: tensor<?x24xf32>):
// CHECK-NEXT: kiln.swiglu
// CHECK: kiln.logits %{{.*}}, %{{.*}} {kiln.generated_kernel}
// CHECK-LABEL: func.func @decode

// FUSED-LABEL: func.func @prefill
// FUSED: attributes {families = ["horizontal", "prologue", "epilogue"]}
// FUSED-NOT: families = []
// FUSED: kiln.logits %{{.*}}, %{{.*}} {kiln.generated_kernel}

// PLAN-LABEL: func.func @prefill
// PLAN-NOT: plan.call_kernel "kiln_k_linear"
// PLAN-NOT: plan.call_kernel "kiln_k_add"
// PLAN: plan.call_fused @kiln_linear_prefill_0(
// PLAN: %[[LOGITS:.*]] = plan.logits : memref<1x32xf32>
// PLAN-NOT: plan.call_kernel "kiln_k_linear"
// PLAN: plan.call_fused @kiln_logits_prefill_{{[0-9]+}}(%{{.*}}, %{{.*}}, %[[LOGITS]], %arg0)
// PLAN: plan.fused_kernel @kiln_linear_prefill_0 families [] {
// PLAN: plan.fused_kernel @kiln_add_prefill_{{[0-9]+}} families [] {
// PLAN: plan.fused_kernel @kiln_swiglu_prefill_{{[0-9]+}} families [] {
// PLAN: plan.fused_kernel @kiln_logits_prefill_{{[0-9]+}} families [] {
// PLAN-NEXT: ^bb0(%{{.*}}: tensor<?x16xf32>, %{{.*}}: tensor<32x16xf32>):
// PLAN-NEXT: kiln.logits
// PLAN-NOT: kiln.generated_kernel

module {
  kiln.weight @q4 : tensor<8x18xi8> {source = #kiln.source<file = "t.gguf", tensor = "q4", storage = "q4_0", shape = [8, 32], offset = 0, bytes = 144>, transforms = [#kiln.transform<"repack", {format = "q4_0", part = "blocks", rows = 8 : i64, cols = 32 : i64}>]}
  kiln.weight @h16 : tensor<8x16xf16> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = []}

  // KINDS-LABEL: func.func @kinds
  // KINDS: kiln.fused({{.*}}) attributes {families = []} {
  // KINDS: kiln.linear %{{.*}} {format = "q4_0"}
  // KINDS: kiln.fused({{.*}}) attributes {families = []} {
  // KINDS: kiln.linear {{.*}} : tensor<?x16xf16>, tensor<8x16xf16> -> tensor<?x8xf16>
  // KINDS: kiln.fused({{.*}}) attributes {families = []} {
  // KINDS: kiln.silu {{.*}} : tensor<?x8xf16>
  // KINDS: kiln.fused({{.*}}) attributes {families = []} {
  // KINDS: kiln.quantized_linear {{.*}}bits = 8
  // KINDS: kiln.fused({{.*}}) attributes {families = []} {
  // KINDS: kiln.quantized_linear {{.*}}bits = 4
  // KINDS-NOT: kiln.fused
  // KINDS: kiln.quantized_linear {{.*}}act_quant = "int8_per_token"
  // KINDS-NOT: kiln.fused
  // KINDS: return
  func.func @kinds(%x: tensor<?x32xf32>, %h: tensor<?x16xf16>, %y: tensor<?x16xf32>,
                   %q8: tensor<8x16xi8>, %s8: tensor<8xf32>,
                   %q4: tensor<8x8xi8>, %s4: tensor<8x1xf32>, %z4: tensor<8x1xi8>)
      -> (tensor<?x8xf32>, tensor<?x8xf16>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
    %w0 = kiln.weight_ref @q4 : tensor<8x18xi8>
    %a = kiln.linear %x, %w0 {format = "q4_0"} : tensor<?x32xf32>, tensor<8x18xi8> -> tensor<?x8xf32>
    %w1 = kiln.weight_ref @h16 : tensor<8x16xf16>
    %b = kiln.linear %h, %w1 : tensor<?x16xf16>, tensor<8x16xf16> -> tensor<?x8xf16>
    %c = kiln.silu %b : tensor<?x8xf16>
    %d = kiln.quantized_linear %y, %q8, %s8 {bits = 8 : i64, group_size = 0 : i64} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
    %e = kiln.quantized_linear %y, %q4, %s4, %z4 {bits = 4 : i64, group_size = 16 : i64} : tensor<?x16xf32>, tensor<8x8xi8>, tensor<8x1xf32>, tensor<8x1xi8> -> tensor<?x8xf32>
    %f = kiln.quantized_linear %y, %q8, %s8 {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_token"} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
    return %a, %c, %d, %e, %f : tensor<?x8xf32>, tensor<?x8xf16>, tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
  }
}
