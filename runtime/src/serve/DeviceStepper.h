//===- DeviceStepper.h - The batched step on a CUDA device -------*- C++ -*-===//
//
// What a cuda artifact's kiln_step needs from the serving engine: a paged
// KV pool in device memory laid out as the host pool (CpuStepper.h
// poolLayout) and the step's arrays uploaded each step (CudaExecutor.h
// stepper_*). Rank 0's engine owns one; so does each follower rank of a
// partitioned cuda engine (comm/ParallelExecutor.h), with the same block
// geometry and step limits, so that rank 0's block tables address every
// rank's pool.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_SERVE_DEVICESTEPPER_H
#define KILN_RUNTIME_SERVE_DEVICESTEPPER_H

#include "base/Status.h"
#include "cuda/CudaBackend.h"
#include "serve/CpuStepper.h"

#include <cstdint>
#include <memory>

namespace kiln::rt {
class Artifact;
}

namespace kiln::rt::serve {

/// The most a step may hold: sequences, token rows (at most the plan's
/// step max_tokens) and block-table entries per sequence.
struct StepLimits {
  int32_t maxSeqs = 0, maxTokens = 0, maxBlocks = 0;
};

/// The device pool of `numBlocks` blocks of `blockTokens` positions in the
/// KV format of `artifact`'s manifest (kv_cache.dtype, layers, kv_heads,
/// head_dim) and the step buffers for `limits`, on the artifact's device.
/// Errors: the artifact is not a cuda one with a step entry point
/// (KILN_RT_UNIMPLEMENTED), device memory (KILN_RT_RESOURCE_EXHAUSTED),
/// each naming the artifact's directory and device.
Status createDeviceStepper(const Artifact &artifact, int64_t blockTokens,
                           int64_t numBlocks, const StepLimits &limits,
                           std::unique_ptr<CudaStepper> &out);

/// The copies, then kiln_step over `step` on the device: logits
/// float32[step.numSeqs, vocab] copied to the host array `logits`.
/// Errors: the stepper's (a CUDA or NCCL failure, or
/// KILN_RT_DEADLINE_EXCEEDED when a peer rank missed a collective).
Status runDeviceStep(CudaStepper &stepper, const StepArrays &step,
                     float *logits, int64_t vocab);

} // namespace kiln::rt::serve

#endif // KILN_RUNTIME_SERVE_DEVICESTEPPER_H
