// RUN: kiln-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// Parts of a pre-quantized GPTQ linear [128 out, 128 in], group 32: the
// repack transform turns each checkpoint tensor into Kiln's layout; row
// reorderings (rope_half_to_adjacent) may follow it.
// CHECK-LABEL: kiln.weight @wq.qweight : tensor<128x64xi8>
// CHECK-SAME: #kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "qweight", rows = 128 : i64}>, #kiln.transform<"rope_half_to_adjacent", {heads = 8 : i64}>
kiln.weight @wq.qweight : tensor<128x64xi8> {source = #kiln.source<file = "m.safetensors", tensor = "q.qweight", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "qweight", rows = 128 : i64}>, #kiln.transform<"rope_half_to_adjacent", {heads = 8 : i64}>]}
// CHECK: kiln.weight @wq.scales : tensor<128x4xf32>
kiln.weight @wq.scales : tensor<128x4xf32> {source = #kiln.source<file = "m.safetensors", tensor = "q.scales", storage = "f16", shape = [4, 128], offset = 0, bytes = 1024>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "scales", rows = 128 : i64}>]}
// CHECK: kiln.weight @wq.zeros : tensor<128x4xi8>
kiln.weight @wq.zeros : tensor<128x4xi8> {source = #kiln.source<file = "m.safetensors", tensor = "q.qzeros", storage = "i32", shape = [4, 16], offset = 0, bytes = 256>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "zeros", rows = 128 : i64}>]}
// GGUF Q8_0 as grouped 8-bit: int8 [out, in], scales [out, in / 32].
// CHECK: kiln.weight @w8.qweight : tensor<64x64xi8>
kiln.weight @w8.qweight : tensor<64x64xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q8_0", shape = [64, 64], offset = 0, bytes = 4352>, transforms = [#kiln.transform<"repack", {bits = 8 : i64, cols = 64 : i64, format = "q8_0", group_size = 32 : i64, part = "qweight", rows = 64 : i64}>]}
// CHECK: kiln.weight @w8.scales : tensor<64x2xf32>
kiln.weight @w8.scales : tensor<64x2xf32> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.attn_q.weight", storage = "q8_0", shape = [64, 64], offset = 0, bytes = 4352>, transforms = [#kiln.transform<"repack", {bits = 8 : i64, cols = 64 : i64, format = "q8_0", group_size = 32 : i64, part = "scales", rows = 64 : i64}>]}

// -----

// expected-error @+1 {{'repack' transform needs 'format' = "gptq", "gptq_v2", "awq", "q4_0" or "q8_0"}}
kiln.weight @w : tensor<128x64xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "exl2", group_size = 32 : i64, part = "qweight", rows = 128 : i64}>]}

// -----

// expected-error @+1 {{'repack' of format 'gptq' needs 'bits' = 4}}
kiln.weight @w : tensor<128x64xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 3 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "qweight", rows = 128 : i64}>]}

// -----

// expected-error @+1 {{'repack' transform needs a positive even 'group_size'}}
kiln.weight @w : tensor<128x64xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "awq", group_size = 33 : i64, part = "qweight", rows = 128 : i64}>]}

// -----

// expected-error @+1 {{only 4-bit 'repack' has zero points}}
kiln.weight @w : tensor<64x2xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "q8_0", shape = [64, 64], offset = 0, bytes = 4352>, transforms = [#kiln.transform<"repack", {bits = 8 : i64, cols = 64 : i64, format = "q8_0", group_size = 32 : i64, part = "zeros", rows = 64 : i64}>]}

// -----

// expected-error @+1 {{'repack' transform needs positive 'rows' and 'cols'}}
kiln.weight @w : tensor<128x64xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, format = "gptq", group_size = 32 : i64, part = "qweight"}>]}

// -----

// The declared type must be the repacked layout: [128, 64] bytes, not the
// checkpoint's [16, 128] words.
// expected-error @+1 {{'kiln.weight' op recipe produces shape [128, 64] but the weight is declared 'tensor<16x128xi8>'}}
kiln.weight @w : tensor<16x128xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "qweight", rows = 128 : i64}>]}

// -----

// Scales are f32, not i8.
// expected-error @+1 {{'kiln.weight' op an i8 weight must end with a 'quantize' transform producing "qweight" or "zeros", and only it; got 'tensor<128x4xi8>'}}
kiln.weight @w : tensor<128x4xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "f16", shape = [4, 128], offset = 0, bytes = 1024>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "scales", rows = 128 : i64}>]}

// -----

// expected-error @+1 {{'rope_half_to_adjacent' with 3 heads needs a matrix or vector whose rows split into heads of even size, got shape [128, 64]}}
kiln.weight @w : tensor<128x64xi8> {source = #kiln.source<file = "m", tensor = "w", storage = "i32", shape = [16, 128], offset = 0, bytes = 8192>, transforms = [#kiln.transform<"repack", {bits = 4 : i64, cols = 128 : i64, format = "gptq", group_size = 32 : i64, part = "qweight", rows = 128 : i64}>, #kiln.transform<"rope_half_to_adjacent", {heads = 3 : i64}>]}
