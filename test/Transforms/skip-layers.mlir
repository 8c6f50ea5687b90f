// kiln-skip-layers (the self-draft of speculative decoding): the listed
// layers' ops and the weights only they read go from every entry point;
// the residual stream skips them.
// RUN: kiln-compile %shared/models/stories260K/stories260K.bin --emit=kiln --fuse=none -o %t.mlir
// RUN: kiln-opt %t.mlir --kiln-skip-layers="layers=1,3" | FileCheck %s --implicit-check-not="layers.1." --implicit-check-not="layers.3." --implicit-check-not="layer = 1 :" --implicit-check-not="layer = 3 :"
// CHECK: kiln.weight @layers.0.attention_norm
// CHECK: kiln.weight @layers.2.attention_norm
// CHECK: kiln.weight @layers.4.attention_norm
// CHECK: func.func @prefill
// CHECK: kiln.attention {{.*}}layer = 0 : i64
// CHECK: kiln.attention {{.*}}layer = 2 : i64
// CHECK: kiln.attention {{.*}}layer = 4 : i64
// CHECK: func.func @decode
// RUN: kiln-opt %s --kiln-skip-layers="layers=0" --verify-diagnostics

// expected-error@+1 {{kiln-skip-layers: layer 0 is not a layer of the model (it has 0 layers, 0 to 0)}}
module {
}
