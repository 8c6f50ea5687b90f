//===- DeviceStepper.cpp - The batched step on a CUDA device --------------===//
#include "serve/DeviceStepper.h"

#include "artifact/Artifact.h"

#include <cstring>
#include <vector>

namespace kiln::rt::serve {

Status createDeviceStepper(const Artifact &artifact, int64_t blockTokens,
                           int64_t numBlocks, const StepLimits &limits,
                           std::unique_ptr<CudaStepper> &out) {
  const Manifest &m = artifact.manifest();
  if (artifact.target() != Target::Cuda || !artifact.cudaBackend() ||
      !artifact.hasStep())
    return unimplemented(artifact.dir() +
                         ": has no batched step on a CUDA device "
                         "(runtime.entry_points.step of a cuda artifact)");
  const PoolFormat format = poolFormat(m.kvDtype);
  const PoolLayout pool = poolLayout(m.kvLayers, m.kvHeads, m.kvHeadDim,
                                     format, numBlocks, blockTokens);
  // The pool lives on the device: the stepper allocates it (and the
  // arena, workspace and step buffers) from the same layout.
  std::vector<kiln_cudaexec_layer_pool_t> layout;
  for (int64_t l = 0; l < m.kvLayers; ++l) {
    const uint64_t base = uint64_t(l) * pool.layerBytes;
    kiln_cudaexec_layer_pool_t lp{};
    lp.k_offset = base;
    lp.v_offset = base + pool.dataBytes;
    if (format.quantized()) {
      lp.k_scales_offset = base + 2 * pool.dataBytes;
      lp.v_scales_offset = base + 2 * pool.dataBytes + pool.scaleBytes;
    }
    layout.push_back(lp);
  }
  kiln_cudaexec_step_desc_t sd{};
  sd.layers = int32_t(m.kvLayers);
  sd.format = format.format;
  sd.block_tokens = int32_t(blockTokens);
  sd.num_blocks = numBlocks;
  sd.pool_bytes = pool.poolBytes;
  sd.kv_row_bytes = pool.kvRowBytes;
  sd.scale_row_bytes = pool.scaleRowBytes;
  sd.layer_pools = layout.data();
  sd.max_seqs = limits.maxSeqs;
  sd.max_tokens = limits.maxTokens;
  sd.max_blocks = limits.maxBlocks;
  Status st = artifact.cudaBackend()->createStepper(sd, out);
  if (!st.isOk())
    return Status(st.code(), artifact.dir() + ": starting the serving engine on " +
                                 artifact.deviceName() + " failed: " +
                                 st.message());
  return Status::ok();
}

Status runDeviceStep(CudaStepper &stepper, const StepArrays &arrays,
                     float *logits, int64_t vocab) {
  kiln_cudaexec_step_t st{};
  st.num_seqs = arrays.numSeqs;
  st.num_tokens = arrays.numTokens;
  st.max_blocks = arrays.maxBlocks;
  st.tokens = arrays.tokens;
  st.positions = arrays.positions;
  st.row_start = arrays.rowStart;
  st.row_count = arrays.rowCount;
  st.pos = arrays.pos;
  st.block_tables = arrays.blockTables;
  st.num_copies = arrays.numCopies;
  st.copy_src = arrays.copySrc;
  st.copy_dst = arrays.copyDst;
  const float *deviceLogits = nullptr; // the stepper's pinned copy
  KILN_RT_RETURN_IF_ERROR(stepper.run(st, deviceLogits));
  std::memcpy(logits, deviceLogits,
              sizeof(float) * size_t(arrays.numSeqs) * size_t(vocab));
  return Status::ok();
}

} // namespace kiln::rt::serve
