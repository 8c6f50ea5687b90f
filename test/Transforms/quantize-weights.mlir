// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-quantize-weights | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-quantize-weights | FileCheck %s --check-prefix=KEEP
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w8a16})" | kiln-opt --kiln-verify | FileCheck %s
// The quantized model still plans, lowers and emits.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=CPP

// Each projection weight becomes int8 values plus per-row f32 scales, both
// lazy recipes over the original source (nothing is computed here); the
// original f32 weights disappear once unused.
// CHECK-NOT: kiln.weight @layers.0.wq :
// CHECK: kiln.weight @layers.0.wq.qweight : tensor<16x16xi8> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wq", storage = "f32", shape = [16, 16], offset = 2112, bytes = 1024>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "qweight"}>]}
// CHECK: kiln.weight @layers.0.wq.scales : tensor<16xf32> {{.*}}transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>]}
// CHECK: kiln.weight @layers.0.w2.qweight : tensor<16x24xi8>
// CHECK: kiln.weight @layers.0.w2.scales : tensor<16xf32>
// Norms, the embedding and the classifier keep the compute type.
// KEEP-DAG: kiln.weight @tok_embeddings : tensor<32x16xf32>
// KEEP-DAG: kiln.weight @layers.0.attention_norm : tensor<16xf32>
// KEEP-DAG: kiln.weight @norm : tensor<16xf32>
// KEEP-DAG: kiln.weight @output : tensor<32x16xf32>

// CHECK-LABEL: func.func @prefill
// CHECK: %[[X:.*]] = kiln.rms_norm
// CHECK: %[[Q:.*]] = kiln.weight_ref @layers.0.wq.qweight : tensor<16x16xi8>
// CHECK: %[[S:.*]] = kiln.weight_ref @layers.0.wq.scales : tensor<16xf32>
// CHECK: kiln.quantized_linear %[[X]], %[[Q]], %[[S]] {bits = 8 : i64, group_size = 0 : i64} : tensor<?x16xf32>, tensor<16x16xi8>, tensor<16xf32> -> tensor<?x16xf32>
// CHECK-NOT: kiln.linear
// CHECK: kiln.logits
// CHECK-LABEL: func.func @decode
// CHECK: kiln.quantized_linear

// The projections are W8A16 kernels, the classifier keeps f32 weights.
// CPP: static void kiln_quantized_linear_prefill_0(
// CPP: e.w.kind = KILN_WEIGHT_W8;
// CPP: static void kiln_logits_prefill_{{[0-9]+}}(
// CPP: e.w.kind = KILN_WEIGHT_F32;
// CPP: KILN_LOGITS
// CPP: kiln_logits_prefill_{{[0-9]+}}(

// W4A16 RTN: 4-bit values packed two per byte, group-wise f32 scales and
// byte zero points; a row of 24 inputs with groups of 16 ends in a group of 8.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-rtn group-size=16})" | FileCheck %s --check-prefix=W4
// W4: kiln.weight @layers.0.w2.qweight : tensor<16x12xi8> {{.*}}#kiln.transform<"quantize", {bits = 4 : i64, group_size = 16 : i64, part = "qweight"}>
// W4: kiln.weight @layers.0.w2.scales : tensor<16x2xf32>
// W4: kiln.weight @layers.0.w2.zeros : tensor<16x2xi8> {{.*}}part = "zeros"
// W4-LABEL: func.func @prefill
// W4: kiln.quantized_linear %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {bits = 4 : i64, group_size = 16 : i64} : tensor<?x16xf32>, tensor<16x8xi8>, tensor<16x1xf32>, tensor<16x1xi8> -> tensor<?x16xf32>
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-quantize-weights{scheme=w4a16-rtn group-size=16},kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=W4CPP
// W4CPP: e.w.kind = KILN_WEIGHT_W4;
// W4CPP: e.w.zeros = a3;
// W4CPP: e.w.group_size = 16;
