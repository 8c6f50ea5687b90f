// The CPU target instantiates linears and elementwise ops from the IR
// (kiln-outline-kernels); a plan that still calls them as runtime kernels is
// an error at the call, naming the pass to run (the CUDA target keeps
// launch wrappers for them, KilnKernels.cuh).
// RUN: kiln-opt %s --kiln-plan-to-emitc --split-input-file --verify-diagnostics

func.func @kiln_prefill_linear(%n: index, %pos: index) {
  %c16 = arith.constant 16 : index
  %x = plan.arena_view[0] (%n) : memref<?x16xf32>
  %w = plan.arena_view[4096] : memref<16x16xf32>
  %y = plan.arena_view[8192] (%n) : memref<?x16xf32>
  // expected-error @+1 {{'plan.call_kernel' op 'kiln_k_linear' is a generated kernel on the cpu target, not a runtime entry point; run kiln-outline-kernels before kiln-memory-plan}}
  plan.call_kernel "kiln_k_linear"(%x, %w, %y, %n, %c16, %c16) : memref<?x16xf32>, memref<16x16xf32>, memref<?x16xf32>, index, index, index
  return
}

// -----

func.func @kiln_prefill_add(%n: index, %pos: index) {
  %c16 = arith.constant 16 : index
  %a = plan.arena_view[0] (%n) : memref<?x16xf32>
  %b = plan.arena_view[4096] (%n) : memref<?x16xf32>
  // expected-error @+1 {{'plan.call_kernel' op 'kiln_k_add' is a generated kernel on the cpu target}}
  plan.call_kernel "kiln_k_add"(%a, %b, %a, %c16) : memref<?x16xf32>, memref<?x16xf32>, memref<?x16xf32>, index
  return
}
