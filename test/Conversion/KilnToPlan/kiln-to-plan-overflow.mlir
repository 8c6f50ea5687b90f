// RUN: kiln-opt %s --kiln-lower-to-plan --verify-diagnostics

// Each weight is 2^47 bytes (8388608 x 4194304 x f32), below the per-weight
// limit; the third would end the weights file past 2^48 bytes: refused, not
// wrapped into a small offset.
kiln.weight @a : tensor<8388608x4194304xf32> {source = #kiln.source<file = "m.bin", tensor = "a", storage = "f32", shape = [8388608, 4194304], offset = 0, bytes = 64>, transforms = []}
kiln.weight @b : tensor<8388608x4194304xf32> {source = #kiln.source<file = "m.bin", tensor = "b", storage = "f32", shape = [8388608, 4194304], offset = 0, bytes = 64>, transforms = []}
// expected-error @+1 {{'kiln.weight' op would end the weights file past 2^48 bytes (offset 281474976710656 + 140737488355328 bytes)}}
kiln.weight @c : tensor<8388608x4194304xf32> {source = #kiln.source<file = "m.bin", tensor = "c", storage = "f32", shape = [8388608, 4194304], offset = 0, bytes = 64>, transforms = []}
