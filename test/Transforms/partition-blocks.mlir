// kiln-partition of weights kept in GGML block formats (GGUF tensors the
// block kernels read as stored): the recipe becomes [repack blocks, slice],
// the slice after the repack and in the weight's element coordinates, and
// the declared type narrows to the shard's rows of raw blocks. Rows
// (wq/wk/wv/w1/w3) are whole rows; columns (wo/w2) whole blocks of every
// row: 32 elements for Q4_1 / Q5_0 / Q8_0 (20 / 22 / 34 bytes), 256 for
// Q4_K / Q6_K (144 / 210 bytes).
// RUN: kiln-opt %s --split-input-file --kiln-partition="tp=3 rank=1" | FileCheck %s --check-prefix=TP3
// RUN: kiln-opt %s --split-input-file --kiln-partition="tp=2 rank=1" | FileCheck %s --check-prefix=TP2
// The real target: SmolLM2-135M-Instruct Q4_1 (9 heads of 64, 3 KV heads,
// dim 576, FFN 1536) on 3 ranks, one KV head each; its Q8_0 embedding and
// tied classifier stay whole.
// RUN: kiln-compile %shared/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf --emit=kiln --fuse=none > %t.mlir
// RUN: kiln-opt %t.mlir --kiln-partition="tp=3 rank=2" | FileCheck %s --check-prefix=SMOL
// The shards go on through fusion and the lowering: the rank's q, k and v
// (and gate and up) shards fuse into one weight of raw blocks; the block
// kernel reads the narrowed rows.
// RUN: kiln-opt %t.mlir --pass-pipeline="builtin.module(kiln-partition{tp=3 rank=0},kiln-verify,kiln-fuse,func.func(kiln-memory-plan),kiln-lower-to-plan)" | FileCheck %s --check-prefix=PIPE

// Legacy 32-element blocks (Q4_1; w2 in Q8_0): dim 192 (6 heads of 32,
// 6 KV heads), FFN 384.
// TP3-LABEL: kiln.weight @layers.0.wq : tensor<64x120xi8>
// TP3-SAME: transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 192 : i64}>, #kiln.transform<"slice", {axis = 0 : i64, offset = 64 : i64, size = 64 : i64}>]
// TP3: kiln.weight @layers.0.wk : tensor<64x120xi8> {{.*}}"slice", {axis = 0 : i64, offset = 64 : i64, size = 64 : i64}
// TP3: kiln.weight @layers.0.wv : tensor<64x120xi8> {{.*}}"slice", {axis = 0 : i64, offset = 64 : i64, size = 64 : i64}
// TP3: kiln.weight @layers.0.wo : tensor<192x40xi8>
// TP3-SAME: transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 192 : i64}>, #kiln.transform<"slice", {axis = 1 : i64, offset = 64 : i64, size = 64 : i64}>]
// TP3: kiln.weight @layers.0.w1 : tensor<128x120xi8> {{.*}}"slice", {axis = 0 : i64, offset = 128 : i64, size = 128 : i64}
// TP3: kiln.weight @layers.0.w2 : tensor<192x136xi8> {{.*}}format = "q8_0"{{.*}}"slice", {axis = 1 : i64, offset = 128 : i64, size = 128 : i64}
// TP3: kiln.weight @layers.0.w3 : tensor<128x120xi8> {{.*}}"slice", {axis = 0 : i64, offset = 128 : i64, size = 128 : i64}
// TP3-LABEL: func.func @prefill(
// TP3: kiln.linear {{.*}} {format = "q4_1"} : tensor<?x192xf32>, tensor<64x120xi8> -> tensor<?x64xf32>
// TP3: %[[O:.*]] = kiln.linear {{.*}} {format = "q4_1"} : tensor<?x64xf32>, tensor<192x40xi8> -> tensor<?x192xf32>
// TP3: kiln.all_reduce %[[O]] {group_size = 3 : i64}
// TP3: %[[D:.*]] = kiln.linear {{.*}} {format = "q8_0"} : tensor<?x128xf32>, tensor<192x136xi8> -> tensor<?x192xf32>
// TP3: kiln.all_reduce %[[D]] {group_size = 3 : i64}
// TP2-LABEL: kiln.weight @layers.0.wq : tensor<96x120xi8> {{.*}}"slice", {axis = 0 : i64, offset = 96 : i64, size = 96 : i64}
// TP2: kiln.weight @layers.0.wo : tensor<192x60xi8> {{.*}}"slice", {axis = 1 : i64, offset = 96 : i64, size = 96 : i64}
// TP2: kiln.weight @layers.0.w2 : tensor<192x204xi8> {{.*}}"slice", {axis = 1 : i64, offset = 192 : i64, size = 192 : i64}
module attributes {kiln.model = {name = "blocks-legacy", max_seq_len = 16 : i64}} {
  kiln.weight @layers.0.wq : tensor<192x120xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wq", storage = "q4_1", shape = [192, 192], offset = 0, bytes = 23040>, transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 192 : i64}>]}
  kiln.weight @layers.0.wk : tensor<192x120xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wk", storage = "q4_1", shape = [192, 192], offset = 23040, bytes = 23040>, transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 192 : i64}>]}
  kiln.weight @layers.0.wv : tensor<192x120xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wv", storage = "q4_1", shape = [192, 192], offset = 46080, bytes = 23040>, transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 192 : i64}>]}
  kiln.weight @layers.0.wo : tensor<192x120xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wo", storage = "q4_1", shape = [192, 192], offset = 69120, bytes = 23040>, transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 192 : i64}>]}
  kiln.weight @layers.0.w1 : tensor<384x120xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.w1", storage = "q4_1", shape = [384, 192], offset = 92160, bytes = 46080>, transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 384 : i64}>]}
  kiln.weight @layers.0.w2 : tensor<192x408xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.w2", storage = "q8_0", shape = [192, 384], offset = 138240, bytes = 78336>, transforms = [#kiln.transform<"repack", {cols = 384 : i64, format = "q8_0", part = "blocks", rows = 192 : i64}>]}
  kiln.weight @layers.0.w3 : tensor<384x120xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.w3", storage = "q4_1", shape = [384, 192], offset = 216576, bytes = 46080>, transforms = [#kiln.transform<"repack", {cols = 192 : i64, format = "q4_1", part = "blocks", rows = 384 : i64}>]}
  func.func @prefill(%x: tensor<?x192xf32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 6, 32, f32>) -> tensor<?x192xf32> attributes {kiln.max_tokens = 4 : i64} {
    %wq = kiln.weight_ref @layers.0.wq : tensor<192x120xi8>
    %q = kiln.linear %x, %wq {format = "q4_1"} : tensor<?x192xf32>, tensor<192x120xi8> -> tensor<?x192xf32>
    %wk = kiln.weight_ref @layers.0.wk : tensor<192x120xi8>
    %k = kiln.linear %x, %wk {format = "q4_1"} : tensor<?x192xf32>, tensor<192x120xi8> -> tensor<?x192xf32>
    %wv = kiln.weight_ref @layers.0.wv : tensor<192x120xi8>
    %v = kiln.linear %x, %wv {format = "q4_1"} : tensor<?x192xf32>, tensor<192x120xi8> -> tensor<?x192xf32>
    %qr = kiln.rope %q, %pos {num_heads = 6 : i64, head_dim = 32 : i64, rotary_dim = 32 : i64, theta = 1.0e4 : f32} : tensor<?x192xf32>
    %kr = kiln.rope %k, %pos {num_heads = 6 : i64, head_dim = 32 : i64, rotary_dim = 32 : i64, theta = 1.0e4 : f32} : tensor<?x192xf32>
    %att = kiln.attention %qr, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 6 : i64, head_dim = 32 : i64, scale = 0.125 : f32} : tensor<?x192xf32>, tensor<?x192xf32>, tensor<?x192xf32>, !kiln.kv_cache<1, 16, 6, 32, f32> -> tensor<?x192xf32>
    %wo = kiln.weight_ref @layers.0.wo : tensor<192x120xi8>
    %o = kiln.linear %att, %wo {format = "q4_1"} : tensor<?x192xf32>, tensor<192x120xi8> -> tensor<?x192xf32>
    %h1 = kiln.add %x, %o : tensor<?x192xf32>
    %w1 = kiln.weight_ref @layers.0.w1 : tensor<384x120xi8>
    %gate = kiln.linear %h1, %w1 {format = "q4_1"} : tensor<?x192xf32>, tensor<384x120xi8> -> tensor<?x384xf32>
    %w3 = kiln.weight_ref @layers.0.w3 : tensor<384x120xi8>
    %up = kiln.linear %h1, %w3 {format = "q4_1"} : tensor<?x192xf32>, tensor<384x120xi8> -> tensor<?x384xf32>
    %act = kiln.swiglu %gate, %up : tensor<?x384xf32>
    %w2 = kiln.weight_ref @layers.0.w2 : tensor<192x408xi8>
    %down = kiln.linear %act, %w2 {format = "q8_0"} : tensor<?x384xf32>, tensor<192x408xi8> -> tensor<?x192xf32>
    %h2 = kiln.add %h1, %down : tensor<?x192xf32>
    return %h2 : tensor<?x192xf32>
  }
}

// -----

// K-quants, 256-element blocks: dim 768 (12 heads of 64, 6 KV heads), FFN
// 1536; q/k/v and gate/up in Q4_K, down in Q6_K (1536 columns: 3 blocks of
// every row per rank at tp=2, 2 at tp=3), wo in Q5_0 (768 columns: 384 at
// tp=2 would straddle a 256-element block).
// TP3-LABEL: kiln.weight @layers.0.wq : tensor<256x432xi8>
// TP3-SAME: transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q4_k", part = "blocks", rows = 768 : i64}>, #kiln.transform<"slice", {axis = 0 : i64, offset = 256 : i64, size = 256 : i64}>]
// TP3: kiln.weight @layers.0.wk : tensor<128x432xi8> {{.*}}"slice", {axis = 0 : i64, offset = 128 : i64, size = 128 : i64}
// TP3: kiln.weight @layers.0.wo : tensor<768x176xi8> {{.*}}format = "q5_0"{{.*}}"slice", {axis = 1 : i64, offset = 256 : i64, size = 256 : i64}
// TP3: kiln.weight @layers.0.w2 : tensor<768x420xi8>
// TP3-SAME: transforms = [#kiln.transform<"repack", {cols = 1536 : i64, format = "q6_k", part = "blocks", rows = 768 : i64}>, #kiln.transform<"slice", {axis = 1 : i64, offset = 512 : i64, size = 512 : i64}>]
// TP3: kiln.linear {{.*}} {format = "q6_k"} : tensor<?x512xf32>, tensor<768x420xi8> -> tensor<?x768xf32>
// TP2-LABEL: kiln.weight @layers.0.wq : tensor<384x432xi8> {{.*}}"slice", {axis = 0 : i64, offset = 384 : i64, size = 384 : i64}
// TP2: kiln.weight @layers.0.wo : tensor<768x264xi8> {{.*}}"slice", {axis = 1 : i64, offset = 384 : i64, size = 384 : i64}
// TP2: kiln.weight @layers.0.w2 : tensor<768x630xi8> {{.*}}"slice", {axis = 1 : i64, offset = 768 : i64, size = 768 : i64}
// TP2: kiln.linear {{.*}} {format = "q6_k"} : tensor<?x768xf32>, tensor<768x630xi8> -> tensor<?x768xf32>
module attributes {kiln.model = {name = "blocks-kquant", max_seq_len = 16 : i64}} {
  kiln.weight @layers.0.wq : tensor<768x432xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wq", storage = "q4_k", shape = [768, 768], offset = 0, bytes = 331776>, transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q4_k", part = "blocks", rows = 768 : i64}>]}
  kiln.weight @layers.0.wk : tensor<384x432xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wk", storage = "q4_k", shape = [384, 768], offset = 331776, bytes = 165888>, transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q4_k", part = "blocks", rows = 384 : i64}>]}
  kiln.weight @layers.0.wv : tensor<384x432xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wv", storage = "q4_k", shape = [384, 768], offset = 497664, bytes = 165888>, transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q4_k", part = "blocks", rows = 384 : i64}>]}
  kiln.weight @layers.0.wo : tensor<768x528xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.wo", storage = "q5_0", shape = [768, 768], offset = 663552, bytes = 405504>, transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q5_0", part = "blocks", rows = 768 : i64}>]}
  kiln.weight @layers.0.w1 : tensor<1536x432xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.w1", storage = "q4_k", shape = [1536, 768], offset = 1069056, bytes = 663552>, transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q4_k", part = "blocks", rows = 1536 : i64}>]}
  kiln.weight @layers.0.w2 : tensor<768x1260xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.w2", storage = "q6_k", shape = [768, 1536], offset = 1732608, bytes = 967680>, transforms = [#kiln.transform<"repack", {cols = 1536 : i64, format = "q6_k", part = "blocks", rows = 768 : i64}>]}
  kiln.weight @layers.0.w3 : tensor<1536x432xi8> {source = #kiln.source<file = "m.gguf", tensor = "blk.0.w3", storage = "q4_k", shape = [1536, 768], offset = 2700288, bytes = 663552>, transforms = [#kiln.transform<"repack", {cols = 768 : i64, format = "q4_k", part = "blocks", rows = 1536 : i64}>]}
  func.func @prefill(%x: tensor<?x768xf32>, %pos: index, %cache: !kiln.kv_cache<1, 16, 6, 64, f32>) -> tensor<?x768xf32> attributes {kiln.max_tokens = 4 : i64} {
    %wq = kiln.weight_ref @layers.0.wq : tensor<768x432xi8>
    %q = kiln.linear %x, %wq {format = "q4_k"} : tensor<?x768xf32>, tensor<768x432xi8> -> tensor<?x768xf32>
    %wk = kiln.weight_ref @layers.0.wk : tensor<384x432xi8>
    %k = kiln.linear %x, %wk {format = "q4_k"} : tensor<?x768xf32>, tensor<384x432xi8> -> tensor<?x384xf32>
    %wv = kiln.weight_ref @layers.0.wv : tensor<384x432xi8>
    %v = kiln.linear %x, %wv {format = "q4_k"} : tensor<?x768xf32>, tensor<384x432xi8> -> tensor<?x384xf32>
    %qr = kiln.rope %q, %pos {num_heads = 12 : i64, head_dim = 64 : i64, rotary_dim = 64 : i64, theta = 1.0e4 : f32} : tensor<?x768xf32>
    %kr = kiln.rope %k, %pos {num_heads = 6 : i64, head_dim = 64 : i64, rotary_dim = 64 : i64, theta = 1.0e4 : f32} : tensor<?x384xf32>
    %att = kiln.attention %qr, %kr, %v, %cache, %pos {layer = 0 : i64, num_heads = 12 : i64, num_kv_heads = 6 : i64, head_dim = 64 : i64, scale = 0.125 : f32} : tensor<?x768xf32>, tensor<?x384xf32>, tensor<?x384xf32>, !kiln.kv_cache<1, 16, 6, 64, f32> -> tensor<?x768xf32>
    %wo = kiln.weight_ref @layers.0.wo : tensor<768x528xi8>
    %o = kiln.linear %att, %wo {format = "q5_0"} : tensor<?x768xf32>, tensor<768x528xi8> -> tensor<?x768xf32>
    %h1 = kiln.add %x, %o : tensor<?x768xf32>
    %w1 = kiln.weight_ref @layers.0.w1 : tensor<1536x432xi8>
    %gate = kiln.linear %h1, %w1 {format = "q4_k"} : tensor<?x768xf32>, tensor<1536x432xi8> -> tensor<?x1536xf32>
    %w3 = kiln.weight_ref @layers.0.w3 : tensor<1536x432xi8>
    %up = kiln.linear %h1, %w3 {format = "q4_k"} : tensor<?x768xf32>, tensor<1536x432xi8> -> tensor<?x1536xf32>
    %act = kiln.swiglu %gate, %up : tensor<?x1536xf32>
    %w2 = kiln.weight_ref @layers.0.w2 : tensor<768x1260xi8>
    %down = kiln.linear %act, %w2 {format = "q6_k"} : tensor<?x1536xf32>, tensor<768x1260xi8> -> tensor<?x768xf32>
    %h2 = kiln.add %h1, %down : tensor<?x768xf32>
    return %h2 : tensor<?x768xf32>
  }
}

// SMOL: kiln.partition = {kv_head_offset = 2 : i64, model_kv_heads = 3 : i64, rank = 2 : i64, tp = 3 : i64, vocab_parallel = true}
// SMOL: kiln.weight @tok_embeddings : tensor<49152x612xi8>
// SMOL: kiln.weight @layers.0.wq : tensor<192x360xi8> {{.*}}format = "q4_1", part = "blocks", rows = 576 : i64}>, #kiln.transform<"slice", {axis = 0 : i64, offset = 384 : i64, size = 192 : i64}>]
// SMOL: kiln.weight @layers.0.wk : tensor<64x360xi8> {{.*}}"slice", {axis = 0 : i64, offset = 128 : i64, size = 64 : i64}
// SMOL: kiln.weight @layers.0.wo : tensor<576x120xi8> {{.*}}"slice", {axis = 1 : i64, offset = 384 : i64, size = 192 : i64}
// SMOL: kiln.weight @layers.0.w1 : tensor<512x360xi8> {{.*}}"slice", {axis = 0 : i64, offset = 1024 : i64, size = 512 : i64}
// SMOL: kiln.weight @layers.0.w2 : tensor<576x320xi8> {{.*}}"slice", {axis = 1 : i64, offset = 1024 : i64, size = 512 : i64}
// The vocab-parallel classifier keeps a third of the Q8_0 rows (whole
// rows of blocks); the logits are gathered.
// SMOL: kiln.weight @output : tensor<16384x612xi8> {{.*}}transforms = [#kiln.transform<"repack", {cols = 576 : i64, format = "q8_0", part = "blocks", rows = 49152 : i64}>, #kiln.transform<"slice", {axis = 0 : i64, offset = 32768 : i64, size = 16384 : i64}>]}
// SMOL-LABEL: func.func @prefill(
// SMOL-SAME: !kiln.kv_cache<30, {{[0-9]+}}, 1, 64, f32>
// SMOL: kiln.attention {{.*}} {head_dim = 64 : i64, layer = 0 : i64, num_heads = 3 : i64, num_kv_heads = 1 : i64
// SMOL: kiln.linear {{.*}} {format = "q4_1"} : tensor<?x192xf32>, tensor<576x120xi8> -> tensor<?x576xf32>
// SMOL: kiln.linear {{.*}} {format = "q4_1"} : tensor<?x512xf32>, tensor<576x320xi8> -> tensor<?x576xf32>
// SMOL: kiln.logits {{.*}} {format = "q8_0"} : tensor<?x576xf32>, tensor<16384x612xi8> -> tensor<1x16384xf32>
// SMOL: kiln.all_gather {{.*}} {group_size = 3 : i64} : tensor<1x16384xf32> -> tensor<1x49152xf32>

// PIPE: plan.weight @"layers.0.wq+wk+wv" : memref<320x360xi8>
// PIPE: plan.weight @layers.0.wo : memref<576x120xi8>
// PIPE: plan.weight @layers.0.w2 : memref<576x320xi8>
// PIPE: plan.weight @"layers.0.w1+w3" : memref<1024x360xi8>
// PIPE-LABEL: func.func @prefill(
// PIPE: plan.call_kernel "kiln_k_linear_blocks"({{.*}}) : memref<?x192xf32>, memref<576x120xi8>, memref<?x576xf32>
// PIPE: plan.call_kernel "kiln_k_all_reduce"
// PIPE: plan.call_kernel "kiln_k_linear_blocks"({{.*}}) : memref<?x512xf32>, memref<576x320xi8>, memref<?x576xf32>
// PIPE: plan.call_kernel "kiln_k_all_reduce"
