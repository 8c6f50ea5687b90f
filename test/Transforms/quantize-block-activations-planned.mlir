// RUN: kiln-opt %s --kiln-quantize-block-activations --verify-diagnostics

// The pass changes which kernels run, so it must come before the memory
// plan (which records the buffers of the kernels chosen).
// expected-error @+1 {{kiln-quantize-block-activations: 'planned' is already memory-planned; run this pass before kiln-memory-plan}}
func.func @planned(%h: tensor<4x256xf32>, %w: tensor<32x144xi8>) -> tensor<4x32xf32> attributes {kiln.arena_bytes = 512 : i64} {
  %q = kiln.linear %h, %w {format = "q4_k"} : tensor<4x256xf32>, tensor<32x144xi8> -> tensor<4x32xf32>
  return %q : tensor<4x32xf32>
}
