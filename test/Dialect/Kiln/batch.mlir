// The batched step's types and ops round-trip, and their verifiers reject
// mismatched forms.
// RUN: kiln-opt %s --split-input-file | FileCheck %s
// RUN: kiln-opt %s --split-input-file | kiln-opt --split-input-file | FileCheck %s
// RUN: kiln-opt %s --split-input-file --mlir-print-op-generic | kiln-opt --split-input-file | FileCheck %s

// CHECK-LABEL: func.func @step
// CHECK-SAME: !kiln.batch, %{{.*}}: !kiln.paged_kv_cache<2, 4, 8, f16>
// CHECK: kiln.rope %{{.*}}, %{{.*}} {{.*}} : tensor<?x64xf16>, !kiln.batch
// CHECK: kiln.attention {{.*}} : tensor<?x64xf16>, tensor<?x32xf16>, tensor<?x32xf16>, !kiln.paged_kv_cache<2, 4, 8, f16>, !kiln.batch -> tensor<?x64xf16>
// CHECK: kiln.last_rows %{{.*}}, %{{.*}} : tensor<?x64xf16>
// CHECK: kiln.logits {{.*}} {all_rows} : tensor<?x64xf16>, tensor<512x64xf16> -> tensor<?x512xf32>
func.func @step(%q: tensor<?x64xf16>, %k: tensor<?x32xf16>, %b: !kiln.batch, %c: !kiln.paged_kv_cache<2, 4, 8, f16>, %w: tensor<512x64xf16>) -> tensor<?x512xf32> {
  %r = kiln.rope %q, %b {num_heads = 8 : i64, head_dim = 8 : i64, rotary_dim = 8 : i64, theta = 1.0e4 : f32} : tensor<?x64xf16>, !kiln.batch
  %o = kiln.attention %r, %k, %k, %c, %b {layer = 1 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32} : tensor<?x64xf16>, tensor<?x32xf16>, tensor<?x32xf16>, !kiln.paged_kv_cache<2, 4, 8, f16>, !kiln.batch -> tensor<?x64xf16>
  %l = kiln.last_rows %o, %b : tensor<?x64xf16>
  %g = kiln.logits %l, %w {all_rows} : tensor<?x64xf16>, tensor<512x64xf16> -> tensor<?x512xf32>
  return %g : tensor<?x512xf32>
}

// -----

// An 8-bit paged cache with centered keys.
// CHECK-LABEL: func.func @centered
// CHECK: !kiln.paged_kv_cache<1, 4, 8, i8>, !kiln.batch -> tensor<?x64xf32>
func.func @centered(%q: tensor<?x64xf32>, %k: tensor<?x32xf32>, %b: !kiln.batch, %c: !kiln.paged_kv_cache<1, 4, 8, i8>, %mu: tensor<32xf32>) -> tensor<?x64xf32> {
  %o = kiln.attention %q, %k, %k, %c, %b key_mean(%mu : tensor<32xf32>) {layer = 0 : i64, num_heads = 8 : i64, num_kv_heads = 4 : i64, head_dim = 8 : i64, scale = 0.35 : f32, key_mean_theta = 1.0e4 : f32, key_mean_rotary_dim = 8 : i64} : tensor<?x64xf32>, tensor<?x32xf32>, tensor<?x32xf32>, !kiln.paged_kv_cache<1, 4, 8, i8>, !kiln.batch -> tensor<?x64xf32>
  return %o : tensor<?x64xf32>
}
