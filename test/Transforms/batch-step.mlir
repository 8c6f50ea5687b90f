// kiln-batch-step: @step is @prefill over a !kiln.batch and a
// !kiln.paged_kv_cache of the same geometry; RoPE and attention take the
// batch, the classifier reads the last row of every sequence (taken before
// the final norm) and returns one logits row per sequence. @prefill and
// @decode are untouched.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-batch-step | FileCheck %s
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --kiln-batch-step | kiln-opt --kiln-verify -o /dev/null
// Lowered: the step's kernels take the context (batch, pools) and the rows
// after kiln.last_rows are the batch's sequences (plan.batch_size).
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-batch-step,kiln-fuse,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize)" | FileCheck %s --check-prefix=PLAN
// Emitted: kiln_step(ctx, n, pos) passing ctx to the step kernels, and a C++
// translation unit that compiles against kernel_abi.h.
// RUN: kiln-opt %S/../Inputs/tiny-llama.mlir --pass-pipeline="builtin.module(kiln-batch-step,kiln-fuse,kiln-outline-kernels,func.func(kiln-memory-plan),kiln-lower-to-plan,canonicalize,kiln-plan-to-emitc)" -o %t.mlir
// RUN: mlir-translate --mlir-to-cpp %t.mlir -o %t.cpp
// RUN: FileCheck %s --check-prefix=CPP --input-file=%t.cpp
// RUN: c++ -std=c++17 -fsyntax-only -Wall -Werror -I%kiln_src_root/runtime/include %t.cpp

// CHECK-LABEL: func.func @prefill(%{{.*}}: tensor<?xi32>, %{{.*}}: index, %{{.*}}: !kiln.kv_cache<1, 64, 2, 4, f32>) -> tensor<1x32xf32>
// CHECK-LABEL: func.func @step(
// CHECK-SAME: %[[TOK:[^:]*]]: tensor<?xi32>, %[[B:[^:]*]]: !kiln.batch, %[[C:[^:]*]]: !kiln.paged_kv_cache<1, 2, 4, f32>) -> tensor<?x32xf32> attributes {kiln.max_tokens = 8 : i64}
// CHECK: kiln.embedding %[[TOK]]
// CHECK: %[[Q:.*]] = kiln.rope %{{.*}}, %[[B]] {{.*}} : tensor<?x16xf32>, !kiln.batch
// CHECK: %[[K:.*]] = kiln.rope %{{.*}}, %[[B]] {{.*}} : tensor<?x8xf32>, !kiln.batch
// CHECK: kiln.attention %[[Q]], %[[K]], %{{.*}}, %[[C]], %[[B]] {{.*}} !kiln.paged_kv_cache<1, 2, 4, f32>, !kiln.batch -> tensor<?x16xf32>
// CHECK: %[[LAST:.*]] = kiln.last_rows %{{.*}}, %[[B]] : tensor<?x16xf32>
// CHECK: %[[N:.*]] = kiln.rms_norm %[[LAST]]
// CHECK: %[[L:.*]] = kiln.logits %[[N]], %{{.*}} {all_rows} : tensor<?x16xf32>, tensor<32x16xf32> -> tensor<?x32xf32>
// CHECK: return %[[L]] : tensor<?x32xf32>
// CHECK-LABEL: func.func @decode(%{{.*}}: tensor<1xi32>, %{{.*}}: index

// PLAN-LABEL: func.func @step(
// PLAN-SAME: %[[N:[^:]*]]: index, %{{.*}}: index)
// PLAN: %[[S:.*]] = plan.batch_size
// PLAN: plan.call_kernel "kiln_k_step_rope"(%{{.*}}, %{{.*}}, %[[N]], %c4, %c4, %c4, %{{.*}}, %c0)
// PLAN: plan.call_kernel "kiln_k_step_rope"(%{{.*}}, %{{.*}}, %[[N]], %c2, %c4, %c4, %{{.*}}, %c0)
// PLAN: plan.call_kernel "kiln_k_step_attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %c0, %c0, %c0, %c4, %c2, %c4, %{{.*}}, %c0)
// PLAN: plan.call_kernel "kiln_k_step_last_rows"(%{{.*}}, %[[LAST:.*]], %c16, %c0)
// PLAN: plan.call_kernel "kiln_k_rms_norm"(%[[LAST]], %{{.*}}, %[[NORM:.*]], %[[S]], %c16
// PLAN: %[[OUT:.*]] = plan.logits : memref<?x32xf32>
// PLAN: plan.call_fused @kiln_logits_step_{{[0-9]+}}(%[[NORM]], %{{.*}}, %[[OUT]], %[[S]])

// CPP: #define KILN_BATCH_SIZE(ctx) ((int64_t)((ctx)->batch->logit_count ? (ctx)->batch->num_logit_rows : (ctx)->batch->num_seqs))
// CPP-LABEL: extern "C" void kiln_step(
// CPP-SAME: kiln_exec_ctx* [[CTX:v[0-9]+]], int64_t {{v[0-9]+}}, int64_t {{v[0-9]+}})
// CPP: int64_t [[S:v[0-9]+]] = KILN_BATCH_SIZE([[CTX]]);
// CPP: kiln_k_step_rope([[CTX]],
// CPP: kiln_k_step_attention([[CTX]],
// CPP: kiln_k_step_last_rows([[CTX]],
// CPP: kiln_k_rms_norm({{.*}}, [[S]],
