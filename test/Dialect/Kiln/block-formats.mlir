// RUN: kiln-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// GGUF tensors kept in their GGML block format (kiln_rt/block_formats.h):
// i8 rows of raw blocks, read by kiln.embedding / kiln.linear / kiln.logits
// with a `format` attribute. dim 256: a Q5_1 row is 8 blocks of 24 bytes, a
// Q4_K row one block of 144 bytes, a Q6_K row one block of 210 bytes.
// CHECK-LABEL: kiln.weight @emb : tensor<8x192xi8>
// CHECK-SAME: #kiln.transform<"repack", {cols = 256 : i64, format = "q5_1", part = "blocks", rows = 8 : i64}>
kiln.weight @emb : tensor<8x192xi8> {source = #kiln.source<file = "m.gguf", tensor = "token_embd.weight", storage = "q5_1", shape = [8, 256], offset = 0, bytes = 1536>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q5_1", part = "blocks", rows = 8 : i64}>]}
kiln.weight @wq : tensor<32x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q4_k", shape = [32, 256], offset = 1536, bytes = 4608>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 32 : i64}>]}
kiln.weight @out : tensor<8x210xi8> {source = #kiln.source<file = "m.gguf", tensor = "output.weight", storage = "q6_k", shape = [8, 256], offset = 6144, bytes = 1680>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q6_k", part = "blocks", rows = 8 : i64}>]}
// CHECK-LABEL: func.func @blocks
func.func @blocks(%tokens: tensor<?xi32>, %h: tensor<?x256xf32>) -> (tensor<?x256xf32>, tensor<?x32xf32>, tensor<1x8xf32>) {
  %e = kiln.weight_ref @emb : tensor<8x192xi8>
  // CHECK: kiln.embedding %{{.*}}, %{{.*}} {format = "q5_1"} : tensor<?xi32>, tensor<8x192xi8> -> tensor<?x256xf32>
  %x = kiln.embedding %tokens, %e {format = "q5_1"} : tensor<?xi32>, tensor<8x192xi8> -> tensor<?x256xf32>
  %w = kiln.weight_ref @wq : tensor<32x144xi8>
  // CHECK: kiln.linear %{{.*}}, %{{.*}} {format = "q4_k"} : tensor<?x256xf32>, tensor<32x144xi8> -> tensor<?x32xf32>
  %q = kiln.linear %h, %w {format = "q4_k"} : tensor<?x256xf32>, tensor<32x144xi8> -> tensor<?x32xf32>
  %o = kiln.weight_ref @out : tensor<8x210xi8>
  // CHECK: kiln.logits %{{.*}}, %{{.*}} {format = "q6_k"} : tensor<?x256xf32>, tensor<8x210xi8> -> tensor<1x8xf32>
  %l = kiln.logits %h, %o {format = "q6_k"} : tensor<?x256xf32>, tensor<8x210xi8> -> tensor<1x8xf32>
  return %x, %q, %l : tensor<?x256xf32>, tensor<?x32xf32>, tensor<1x8xf32>
}

// -----

func.func @unknown_format(%h: tensor<?x256xf32>, %w: tensor<32x144xi8>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op unknown block format 'q4_x' (expected q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k or q6_k)}}
  %q = kiln.linear %h, %w {format = "q4_x"} : tensor<?x256xf32>, tensor<32x144xi8> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @wrong_row_bytes(%h: tensor<?x256xf32>, %w: tensor<32x140xi8>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op expects weight rows of 144 bytes (1 blocks of 144 bytes for 256 elements), got 140}}
  %q = kiln.linear %h, %w {format = "q4_k"} : tensor<?x256xf32>, tensor<32x140xi8> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @partial_block(%h: tensor<?x96xf32>, %w: tensor<32x144xi8>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op expects a row length that is a multiple of 256 (the block length of 'q4_k'), got 96}}
  %q = kiln.linear %h, %w {format = "q4_k"} : tensor<?x96xf32>, tensor<32x144xi8> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @float_weight(%h: tensor<?x256xf32>, %w: tensor<32x144xf32>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op expects the weight in block format 'q4_k' to be i8 bytes, got 'f32'}}
  %q = kiln.linear %h, %w {format = "q4_k"} : tensor<?x256xf32>, tensor<32x144xf32> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @half_activations(%h: tensor<?x256xf16>, %w: tensor<32x144xi8>) -> tensor<?x32xf16> {
  // expected-error @+1 {{'kiln.linear' op block-format weights need f32 activations, got 'f16'}}
  %q = kiln.linear %h, %w {format = "q4_k"} : tensor<?x256xf16>, tensor<32x144xi8> -> tensor<?x32xf16>
  return %q : tensor<?x32xf16>
}

// -----

func.func @bytes_without_format(%h: tensor<?x256xf32>, %w: tensor<32x256xi8>) -> tensor<?x32xf32> {
  // expected-error @+1 {{'kiln.linear' op expects input and weight to have the same element type, got 'f32' and 'i8'}}
  %q = kiln.linear %h, %w : tensor<?x256xf32>, tensor<32x256xi8> -> tensor<?x32xf32>
  return %q : tensor<?x32xf32>
}

// -----

func.func @embedding_row_bytes(%t: tensor<?xi32>, %e: tensor<8x190xi8>) -> tensor<?x256xf32> {
  // expected-error @+1 {{'kiln.embedding' op expects table rows of 192 bytes (8 blocks of 24 bytes for 256 elements), got 190}}
  %x = kiln.embedding %t, %e {format = "q5_1"} : tensor<?xi32>, tensor<8x190xi8> -> tensor<?x256xf32>
  return %x : tensor<?x256xf32>
}

// -----

func.func @logits_shape(%h: tensor<?x256xf32>, %o: tensor<8x210xi8>) -> tensor<1x9xf32> {
  // expected-error @+1 {{'kiln.logits' op expects a result of shape [1, 8] f32, got 'tensor<1x9xf32>'}}
  %l = kiln.logits %h, %o {format = "q6_k"} : tensor<?x256xf32>, tensor<8x210xi8> -> tensor<1x9xf32>
  return %l : tensor<1x9xf32>
}

// -----

// expected-error @+1 {{'repack' of part "blocks" needs a GGML block 'format' (q4_0, q4_1, q5_0, q5_1, q8_0, q2_k, q3_k, q4_k, q5_k or q6_k), got 'gptq'}}
kiln.weight @w : tensor<32x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "w", storage = "q4_k", shape = [32, 256], offset = 0, bytes = 4608>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "gptq", part = "blocks", rows = 32 : i64}>]}

// -----

// expected-error @+1 {{'kiln.weight' op keeps blocks of format 'q4_k' but its source is stored as 'q6_k'}}
kiln.weight @w : tensor<32x144xi8> {source = #kiln.source<file = "m.gguf", tensor = "w", storage = "q6_k", shape = [32, 256], offset = 0, bytes = 6720>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 32 : i64}>]}

// -----

// expected-error @+1 {{'kiln.weight' op 'repack' of blocks: rows 32 x cols 512 must be the source shape and whole q4_k blocks of 256 elements}}
kiln.weight @w : tensor<32x288xi8> {source = #kiln.source<file = "m.gguf", tensor = "w", storage = "q4_k", shape = [32, 256], offset = 0, bytes = 4608>, transforms = [#kiln.transform<"repack", {cols = 512 : i64, format = "q4_k", part = "blocks", rows = 32 : i64}>]}

// -----

// The declared type must be what the recipe produces: [rows, row bytes].
// expected-error @+1 {{'kiln.weight' op}}
kiln.weight @w : tensor<32x256xi8> {source = #kiln.source<file = "m.gguf", tensor = "w", storage = "q4_k", shape = [32, 256], offset = 0, bytes = 4608>, transforms = [#kiln.transform<"repack", {cols = 256 : i64, format = "q4_k", part = "blocks", rows = 32 : i64}>]}
