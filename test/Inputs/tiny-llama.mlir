// A one-layer GQA Llama (dim 16, 4 heads of 4, 2 KV heads, FFN 24, vocab 32,
// context 64): the smallest complete model, shared by pass tests.
module attributes {kiln.model = {name = "tiny", max_seq_len = 64 : i64}} {
  kiln.weight @tok_embeddings : tensor<32x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "tok_embeddings", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
  kiln.weight @layers.0.attention_norm : tensor<16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.attention_norm", storage = "f32", shape = [16], offset = 2048, bytes = 64>, transforms = []}
  kiln.weight @layers.0.wq : tensor<16x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wq", storage = "f32", shape = [16, 16], offset = 2112, bytes = 1024>, transforms = []}
  kiln.weight @layers.0.wk : tensor<8x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wk", storage = "f32", shape = [8, 16], offset = 3136, bytes = 512>, transforms = []}
  kiln.weight @layers.0.wv : tensor<8x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wv", storage = "f32", shape = [8, 16], offset = 3648, bytes = 512>, transforms = []}
  kiln.weight @layers.0.wo : tensor<16x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.wo", storage = "f32", shape = [16, 16], offset = 4160, bytes = 1024>, transforms = []}
  kiln.weight @layers.0.ffn_norm : tensor<16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.ffn_norm", storage = "f32", shape = [16], offset = 5184, bytes = 64>, transforms = []}
  kiln.weight @layers.0.w1 : tensor<24x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.w1", storage = "f32", shape = [24, 16], offset = 5248, bytes = 1536>, transforms = []}
  kiln.weight @layers.0.w2 : tensor<16x24xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.w2", storage = "f32", shape = [16, 24], offset = 6784, bytes = 1536>, transforms = []}
  kiln.weight @layers.0.w3 : tensor<24x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "layers.0.w3", storage = "f32", shape = [24, 16], offset = 8320, bytes = 1536>, transforms = []}
  kiln.weight @norm : tensor<16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "norm", storage = "f32", shape = [16], offset = 9856, bytes = 64>, transforms = []}
  kiln.weight @output : tensor<32x16xf32> {source = #kiln.source<file = "tiny.bin", tensor = "tok_embeddings", storage = "f32", shape = [32, 16], offset = 0, bytes = 2048>, transforms = []}
  func.func @prefill(%tokens: tensor<?xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> attributes {kiln.max_tokens = 8 : i64} {
    %emb = kiln.weight_ref @tok_embeddings : tensor<32x16xf32>
    %h0 = kiln.embedding %tokens, %emb : tensor<?xi32>, tensor<32x16xf32> -> tensor<?x16xf32>
    %an = kiln.weight_ref @layers.0.attention_norm : tensor<16xf32>
    %x = kiln.rms_norm %h0, %an {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
    %wq = kiln.weight_ref @layers.0.wq : tensor<16x16xf32>
    %q = kiln.linear %x, %wq : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
    %wk = kiln.weight_ref @layers.0.wk : tensor<8x16xf32>
    %k = kiln.linear %x, %wk : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %wv = kiln.weight_ref @layers.0.wv : tensor<8x16xf32>
    %v = kiln.linear %x, %wv : tensor<?x16xf32>, tensor<8x16xf32> -> tensor<?x8xf32>
    %qr = kiln.rope %q, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x16xf32>
    %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<?x8xf32>
    %att = kiln.attention %qr, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<?x16xf32>, tensor<?x8xf32>, tensor<?x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<?x16xf32>
    %wo = kiln.weight_ref @layers.0.wo : tensor<16x16xf32>
    %o = kiln.linear %att, %wo : tensor<?x16xf32>, tensor<16x16xf32> -> tensor<?x16xf32>
    %h1 = kiln.add %h0, %o : tensor<?x16xf32>
    %fn = kiln.weight_ref @layers.0.ffn_norm : tensor<16xf32>
    %x2 = kiln.rms_norm %h1, %fn {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
    %w1 = kiln.weight_ref @layers.0.w1 : tensor<24x16xf32>
    %gate = kiln.linear %x2, %w1 : tensor<?x16xf32>, tensor<24x16xf32> -> tensor<?x24xf32>
    %w3 = kiln.weight_ref @layers.0.w3 : tensor<24x16xf32>
    %up = kiln.linear %x2, %w3 : tensor<?x16xf32>, tensor<24x16xf32> -> tensor<?x24xf32>
    %act = kiln.swiglu %gate, %up : tensor<?x24xf32>
    %w2 = kiln.weight_ref @layers.0.w2 : tensor<16x24xf32>
    %down = kiln.linear %act, %w2 : tensor<?x24xf32>, tensor<16x24xf32> -> tensor<?x16xf32>
    %h2 = kiln.add %h1, %down : tensor<?x16xf32>
    %nw = kiln.weight_ref @norm : tensor<16xf32>
    %hn = kiln.rms_norm %h2, %nw {epsilon = 1.0e-5 : f32} : tensor<?x16xf32>, tensor<16xf32>
    %wout = kiln.weight_ref @output : tensor<32x16xf32>
    %logits = kiln.logits %hn, %wout : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
    return %logits : tensor<1x32xf32>
  }
  func.func @decode(%tokens: tensor<1xi32>, %pos: index, %cache: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32> attributes {kiln.max_tokens = 1 : i64} {
    %emb = kiln.weight_ref @tok_embeddings : tensor<32x16xf32>
    %h0 = kiln.embedding %tokens, %emb : tensor<1xi32>, tensor<32x16xf32> -> tensor<1x16xf32>
    %an = kiln.weight_ref @layers.0.attention_norm : tensor<16xf32>
    %x = kiln.rms_norm %h0, %an {epsilon = 1.0e-5 : f32} : tensor<1x16xf32>, tensor<16xf32>
    %wq = kiln.weight_ref @layers.0.wq : tensor<16x16xf32>
    %q = kiln.linear %x, %wq : tensor<1x16xf32>, tensor<16x16xf32> -> tensor<1x16xf32>
    %wk = kiln.weight_ref @layers.0.wk : tensor<8x16xf32>
    %k = kiln.linear %x, %wk : tensor<1x16xf32>, tensor<8x16xf32> -> tensor<1x8xf32>
    %wv = kiln.weight_ref @layers.0.wv : tensor<8x16xf32>
    %v = kiln.linear %x, %wv : tensor<1x16xf32>, tensor<8x16xf32> -> tensor<1x8xf32>
    %qr = kiln.rope %q, %pos {num_heads = 4 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<1x16xf32>
    %kr = kiln.rope %k, %pos {num_heads = 2 : i64, head_dim = 4 : i64, rotary_dim = 4 : i64, theta = 1.0e4 : f32} : tensor<1x8xf32>
    %att = kiln.attention %qr, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 4 : i64, num_kv_heads = 2 : i64, head_dim = 4 : i64, scale = 0.5 : f32} : tensor<1x16xf32>, tensor<1x8xf32>, tensor<1x8xf32>, !kiln.kv_cache<1, 64, 2, 4, f32> -> tensor<1x16xf32>
    %wo = kiln.weight_ref @layers.0.wo : tensor<16x16xf32>
    %o = kiln.linear %att, %wo : tensor<1x16xf32>, tensor<16x16xf32> -> tensor<1x16xf32>
    %h1 = kiln.add %h0, %o : tensor<1x16xf32>
    %fn = kiln.weight_ref @layers.0.ffn_norm : tensor<16xf32>
    %x2 = kiln.rms_norm %h1, %fn {epsilon = 1.0e-5 : f32} : tensor<1x16xf32>, tensor<16xf32>
    %w1 = kiln.weight_ref @layers.0.w1 : tensor<24x16xf32>
    %gate = kiln.linear %x2, %w1 : tensor<1x16xf32>, tensor<24x16xf32> -> tensor<1x24xf32>
    %w3 = kiln.weight_ref @layers.0.w3 : tensor<24x16xf32>
    %up = kiln.linear %x2, %w3 : tensor<1x16xf32>, tensor<24x16xf32> -> tensor<1x24xf32>
    %act = kiln.swiglu %gate, %up : tensor<1x24xf32>
    %w2 = kiln.weight_ref @layers.0.w2 : tensor<16x24xf32>
    %down = kiln.linear %act, %w2 : tensor<1x24xf32>, tensor<16x24xf32> -> tensor<1x16xf32>
    %h2 = kiln.add %h1, %down : tensor<1x16xf32>
    %nw = kiln.weight_ref @norm : tensor<16xf32>
    %hn = kiln.rms_norm %h2, %nw {epsilon = 1.0e-5 : f32} : tensor<1x16xf32>, tensor<16xf32>
    %wout = kiln.weight_ref @output : tensor<32x16xf32>
    %logits = kiln.logits %hn, %wout : tensor<1x16xf32>, tensor<32x16xf32> -> tensor<1x32xf32>
    return %logits : tensor<1x32xf32>
  }
}
