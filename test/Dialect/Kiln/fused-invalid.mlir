// RUN: kiln-opt %s --split-input-file --verify-diagnostics

func.func @slice_outside(%x: tensor<?x16xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.slice_columns' op columns [12, 20) are not inside the input's 16 columns}}
  %s = kiln.slice_columns %x {offset = 12 : i64} : tensor<?x16xf32> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

func.func @slice_type(%x: tensor<?x16xf32>) -> tensor<?x8xf16> {
  // expected-error @+1 {{'kiln.slice_columns' op expects input and result to have the same element type, got 'f32' and 'f16'}}
  %s = kiln.slice_columns %x {offset = 0 : i64} : tensor<?x16xf32> -> tensor<?x8xf16>
  return %s : tensor<?x8xf16>
}

// -----

func.func @unknown_family(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.fused' op unknown fusion family 'vertical'}}
  %r = kiln.fused(%a) attributes {families = ["vertical"]} {
  ^bb0(%x: tensor<?x8xf32>):
    %s = kiln.silu %x : tensor<?x8xf32>
    kiln.yield %s : tensor<?x8xf32>
  } : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @arg_mismatch(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.fused' op has 1 operands but its region takes 2 arguments}}
  %r = kiln.fused(%a) attributes {families = ["elementwise"]} {
  ^bb0(%x: tensor<?x8xf32>, %y: tensor<?x8xf32>):
    %s = kiln.add %x, %y : tensor<?x8xf32>
    kiln.yield %s : tensor<?x8xf32>
  } : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @yield_mismatch(%a: tensor<?x8xf32>) -> tensor<?x4xf32> {
  // expected-error @+1 {{'kiln.fused' op yields 1 values whose types do not match its 1 results}}
  %r = kiln.fused(%a) attributes {families = ["elementwise"]} {
  ^bb0(%x: tensor<?x8xf32>):
    %s = kiln.silu %x : tensor<?x8xf32>
    kiln.yield %s : tensor<?x8xf32>
  } : (tensor<?x8xf32>) -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}

// -----

func.func @not_fusable(%h: tensor<?x8xf32>, %w: tensor<16x8xf32>) -> tensor<1x16xf32> {
  %r = kiln.fused(%h, %w) attributes {families = ["epilogue"]} {
  ^bb0(%x: tensor<?x8xf32>, %v: tensor<16x8xf32>):
    // expected-error @+1 {{'kiln.logits' op cannot be part of a kiln.fused region (expected a linear, rms_norm, slice_columns, rope or elementwise op)}}
    %l = kiln.logits %x, %v : tensor<?x8xf32>, tensor<16x8xf32> -> tensor<1x16xf32>
    kiln.yield %l : tensor<1x16xf32>
  } : (tensor<?x8xf32>, tensor<16x8xf32>) -> tensor<1x16xf32>
  return %r : tensor<1x16xf32>
}

// -----

func.func @two_linears(%a: tensor<?x8xf32>, %w: tensor<8x8xf32>) -> tensor<?x8xf32> {
  %r = kiln.fused(%a, %w) attributes {families = ["horizontal"]} {
  ^bb0(%x: tensor<?x8xf32>, %v: tensor<8x8xf32>):
    %y = kiln.linear %x, %v : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    // expected-error @+1 {{'kiln.linear' op is a second linear in one kiln.fused region}}
    %z = kiln.linear %y, %v : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    kiln.yield %z : tensor<?x8xf32>
  } : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// Only a region of a single op may have no fusion family.
func.func @no_family(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.fused' op expects at least one fusion family (only a region of a single op has none)}}
  %r = kiln.fused(%a) attributes {families = []} {
  ^bb0(%x: tensor<?x8xf32>):
    %s = kiln.silu %x : tensor<?x8xf32>
    %t = kiln.silu %s : tensor<?x8xf32>
    kiln.yield %t : tensor<?x8xf32>
  } : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @norm_not_prologue(%a: tensor<?x8xf32>, %n: tensor<8xf32>) -> tensor<?x8xf32> {
  %r = kiln.fused(%a, %n) attributes {families = ["prologue"]} {
  ^bb0(%x: tensor<?x8xf32>, %w: tensor<8xf32>):
    // expected-error @+1 {{'kiln.rms_norm' op in a kiln.fused region must be the prologue of the region's linear}}
    %s = kiln.rms_norm %x, %w {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32>
    kiln.yield %s : tensor<?x8xf32>
  } : (tensor<?x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{'kiln.weight' op 'concat_rows' part #0 of type 'tensor<8x12xf32>' does not continue the rows of shape [8, 16] x 'f32'}}
kiln.weight @bad_concat : tensor<16x16xf32> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"concat_rows", {parts = [{type = tensor<8x12xf32>, source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [8, 12], offset = 512, bytes = 384>, transforms = []}]}>]}

// -----

// expected-error @+1 {{'kiln.weight' op recipe produces shape [12, 16] but the weight is declared 'tensor<16x16xf32>'}}
kiln.weight @short_concat : tensor<16x16xf32> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"concat_rows", {parts = [{type = tensor<4x16xf32>, source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [4, 16], offset = 512, bytes = 256>, transforms = []}]}>]}

// -----

// expected-error @+1 {{'kiln.weight' op 'concat_rows' part #0: recipe produces shape [4, 16] but the weight is declared 'tensor<8x16xf32>'}}
kiln.weight @bad_part : tensor<16x16xf32> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"concat_rows", {parts = [{type = tensor<8x16xf32>, source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [4, 16], offset = 512, bytes = 256>, transforms = []}]}>]}

// -----

// expected-error @+1 {{'concat_rows' parts must be dictionaries {type = tensor type, source = #kiln.source, transforms = [#kiln.transform...]}}}
kiln.weight @no_type : tensor<16x16xf32> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"concat_rows", {parts = [{source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [8, 16], offset = 512, bytes = 512>, transforms = []}]}>]}

// -----

func.func @scaled_rope(%a: tensor<?x8xf32>, %w: tensor<8x8xf32>, %pos: index) -> tensor<?x8xf32> {
  %r = kiln.fused(%a, %w, %pos) attributes {families = ["epilogue"]} {
  ^bb0(%x: tensor<?x8xf32>, %v: tensor<8x8xf32>, %p: index):
    %y = kiln.linear %x, %v : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
    %s = kiln.slice_columns %y {offset = 0 : i64} : tensor<?x8xf32> -> tensor<?x8xf32>
    // expected-error @+1 {{'kiln.rope' op in a kiln.fused region must be unscaled RoPE of a column slice of the region's linear, at a position operand}}
    %q = kiln.rope %s, %p {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32, scaling = "linear", scaling_factor = 2.0 : f32} : tensor<?x8xf32>
    kiln.yield %q : tensor<?x8xf32>
  } : (tensor<?x8xf32>, tensor<8x8xf32>, index) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

func.func @yield_argument(%a: tensor<?x8xf32>) -> tensor<?x8xf32> {
  // expected-error @+1 {{'kiln.fused' op yields one of its own operands; a kiln.fused region yields values it computes}}
  %r = kiln.fused(%a) attributes {families = ["elementwise"]} {
  ^bb0(%x: tensor<?x8xf32>):
    kiln.yield %x : tensor<?x8xf32>
  } : (tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{'kiln.weight' op 'concat_rows' part #0 is itself a concatenation (the parts of a concat_rows are plain recipes)}}
kiln.weight @nested : tensor<24x16xf32> {source = #kiln.source<file = "t.bin", tensor = "a", storage = "f32", shape = [8, 16], offset = 0, bytes = 512>, transforms = [#kiln.transform<"concat_rows", {parts = [{type = tensor<16x16xf32>, source = #kiln.source<file = "t.bin", tensor = "b", storage = "f32", shape = [8, 16], offset = 512, bytes = 512>, transforms = [#kiln.transform<"concat_rows", {parts = [{type = tensor<8x16xf32>, source = #kiln.source<file = "t.bin", tensor = "c", storage = "f32", shape = [8, 16], offset = 1024, bytes = 512>, transforms = []}]}>]}]}>]}
