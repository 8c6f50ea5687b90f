// A one-layer attention block (dim 16, 4 heads of 4, 2 KV heads, vocab 32,
// context 64) using every quantized form the CPU kernels implement: W8A16
// per channel (wq) and group-wise with a short last group (wk: groups of 6
// over 16 inputs = 6 + 6 + 4), SmoothQuant W8A8 with dynamic per-token
// (wv) and static per-tensor (wo) activation scales, and an FP8 E4M3 KV
// cache. Shared by the lowering and codegen tests.
module attributes {kiln.model = {name = "tiny-quantized", max_seq_len = 64 : i64}} {
  kiln.weight @tok_embeddings : tensor<32x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "tok_embeddings", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
  kiln.weight @wq.qweight : tensor<16x16xi8> {source = #kiln.source<file = "tiny.bin", tensor = "wq", storage = "f32", shape = [16, 16], offset = 2048, bytes = 1024>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "qweight"}>]}
  kiln.weight @wq.scales : tensor<16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "wq", storage = "f32", shape = [16, 16], offset = 2048, bytes = 1024>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>]}
  kiln.weight @wk.qweight : tensor<8x16xi8> {source = #kiln.source<file = "tiny.bin", tensor = "wk", storage = "f32", shape = [8, 16], offset = 3072, bytes = 512>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 6 : i64, part = "qweight"}>]}
  kiln.weight @wk.scales : tensor<8x3xf32> {source = #kiln.source<file = "tiny.bin", tensor = "wk", storage = "f32", shape = [8, 16], offset = 3072, bytes = 512>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 6 : i64, part = "scales"}>]}
  kiln.weight @wv.qweight : tensor<8x16xi8> {source = #kiln.source<file = "tiny.bin", tensor = "wv", storage = "f32", shape = [8, 16], offset = 3584, bytes = 512>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "qweight"}>]}
  kiln.weight @wv.scales : tensor<8xf32> {source = #kiln.source<file = "tiny.bin", tensor = "wv", storage = "f32", shape = [8, 16], offset = 3584, bytes = 512>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>]}
  kiln.weight @wo.qweight : tensor<16x16xi8> {source = #kiln.source<file = "tiny.bin", tensor = "wo", storage = "f32", shape = [16, 16], offset = 4096, bytes = 1024>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "qweight"}>]}
  kiln.weight @wo.scales : tensor<16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "wo", storage = "f32", shape = [16, 16], offset = 4096, bytes = 1024>, transforms = [#kiln.transform<"quantize", {bits = 8 : i64, group_size = 0 : i64, part = "scales"}>]}
  func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN>) -> tensor<1x32xf32> attributes {kiln.max_tokens = 8 : i64} {
    %emb = kiln.weight_ref @tok_embeddings : tensor<32x16xf32>
    %x = kiln.embedding %tokens, %emb : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
    %wq = kiln.weight_ref @wq.qweight : tensor<16x16xi8>
    %sq = kiln.weight_ref @wq.scales : tensor<16xf32>
    %q = kiln.quantized_linear %x, %wq, %sq {bits = 8 : i64, group_size = 0 : i64} : tensor<?x16xf32>, tensor<16x16xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %wk = kiln.weight_ref @wk.qweight : tensor<8x16xi8>
    %sk = kiln.weight_ref @wk.scales : tensor<8x3xf32>
    %k = kiln.quantized_linear %x, %wk, %sk {bits = 8 : i64, group_size = 6 : i64} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8x3xf32> -> tensor<?x8xf32>
    %wv = kiln.weight_ref @wv.qweight : tensor<8x16xi8>
    %sv = kiln.weight_ref @wv.scales : tensor<8xf32>
    %v = kiln.quantized_linear %x, %wv, %sv {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_token"} : tensor<?x16xf32>, tensor<8x16xi8>, tensor<8xf32> -> tensor<?x8xf32>
    %att = kiln.attention %q, %k, %v, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f8E4M3FN> -> tensor<?x16xf32>
    %wo = kiln.weight_ref @wo.qweight : tensor<16x16xi8>
    %so = kiln.weight_ref @wo.scales : tensor<16xf32>
    %o = kiln.quantized_linear %att, %wo, %so {bits = 8 : i64, group_size = 0 : i64, act_quant = "int8_per_tensor", act_scale = 0.25 : f32} : tensor<?x16xf32>, tensor<16x16xi8>, tensor<16xf32> -> tensor<?x16xf32>
    %logits = kiln.logits %o, %emb : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
    return %logits : tensor<1x32xf32>
  }
}
