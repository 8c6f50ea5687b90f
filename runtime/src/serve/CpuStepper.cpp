//===- CpuStepper.cpp - The batched step on the host ----------------------===//
#include "serve/CpuStepper.h"

#include "artifact/Artifact.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace kiln::rt::serve {

namespace {
/// Byte offsets inside the pool are kept 64-byte aligned.
constexpr size_t kAlign = 64;
size_t alignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
} // namespace

PoolFormat poolFormat(const std::string &kvDtype) {
  if (kvDtype == "int8")
    return {KILN_KV_INT8, 1};
  if (kvDtype == "fp8_e4m3")
    return {KILN_KV_FP8, 1};
  return {KILN_KV_PLAIN, int64_t(dtypeBytes(kvDtype))};
}

PoolLayout poolLayout(int64_t layers, int64_t kvHeads, int64_t headDim,
                      PoolFormat format, int64_t numBlocks,
                      int64_t blockTokens) {
  PoolLayout l;
  const size_t rows = size_t(numBlocks * blockTokens);
  l.kvRowBytes = size_t(kvHeads * headDim * format.elemBytes);
  l.scaleRowBytes = format.quantized() ? size_t(kvHeads) * 4 : 0;
  l.dataBytes = alignUp(rows * l.kvRowBytes);
  l.scaleBytes = alignUp(rows * l.scaleRowBytes);
  l.layerBytes = 2 * l.dataBytes + 2 * l.scaleBytes;
  l.poolBytes = l.layerBytes * size_t(layers);
  return l;
}

Status CpuStepper::create(const Artifact &artifact, int64_t blockTokens,
                          int64_t numBlocks, std::unique_ptr<CpuStepper> &out) {
  const Manifest &m = artifact.manifest();
  std::unique_ptr<CpuStepper> s(new CpuStepper(artifact));
  s->blockTokens_ = blockTokens;
  const PoolFormat f = poolFormat(m.kvDtype);
  const PoolLayout l = poolLayout(m.kvLayers, m.kvHeads, m.kvHeadDim, f,
                                  numBlocks, blockTokens);
  s->kvRowBytes_ = l.kvRowBytes;
  s->scaleRowBytes_ = l.scaleRowBytes;
  s->poolBytes_ = l.poolBytes;
  const size_t dataBytes = l.dataBytes, scaleBytes = l.scaleBytes,
               layerBytes = l.layerBytes;
  const bool quantized = f.quantized();
  const int32_t format = f.format;
  void *pool = mmap(nullptr, s->poolBytes_, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (pool == MAP_FAILED)
    return resourceExhausted(artifact.dir() + ": cannot map a KV cache of " +
                             std::to_string(s->poolBytes_) +
                             " bytes: " + std::strerror(errno));
  s->pool_ = pool;
  auto *base = static_cast<uint8_t *>(pool);
  for (int64_t l = 0; l < m.kvLayers; ++l) {
    uint8_t *layer = base + size_t(l) * layerBytes;
    kiln_paged_kv kv{};
    kv.format = format;
    kv.block_tokens = int32_t(blockTokens);
    kv.k_pool = layer;
    kv.v_pool = layer + dataBytes;
    if (quantized) {
      kv.k_scales = reinterpret_cast<float *>(layer + 2 * dataBytes);
      kv.v_scales =
          reinterpret_cast<float *>(layer + 2 * dataBytes + scaleBytes);
    }
    s->kvPages_.push_back(kv);
  }
  const uint64_t arenaBytes = alignUp(m.arenaBytes ? m.arenaBytes : 64);
  s->arena_ = static_cast<uint8_t *>(std::aligned_alloc(kAlign, arenaBytes));
  if (!s->arena_)
    return resourceExhausted(artifact.dir() +
                             ": cannot allocate the activation arena of " +
                             std::to_string(arenaBytes) + " bytes");
  out = std::move(s);
  return Status::ok();
}

CpuStepper::~CpuStepper() {
  if (pool_)
    munmap(pool_, poolBytes_);
  std::free(arena_);
}

std::vector<MicroBatch> splitStep(const StepArrays &step, int32_t parts) {
  const int32_t S = step.numSeqs;
  parts = std::max(1, std::min(parts, S));
  // cuts[k]: the first sequence of micro-batch k.
  std::vector<int32_t> cuts = {0};
  int64_t rows = 0;
  for (int32_t s = 0; s < S && int32_t(cuts.size()) < parts; ++s) {
    rows += step.rowCount[s];
    const int32_t later = S - (s + 1), needed = parts - int32_t(cuts.size());
    if (later == needed ||
        (later > needed &&
         rows * parts >= int64_t(cuts.size()) * step.numTokens))
      cuts.push_back(s + 1);
  }
  cuts.push_back(S);
  std::vector<MicroBatch> out(cuts.size() - 1);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    MicroBatch &m = out[k];
    const int32_t first = cuts[k], n = cuts[k + 1] - cuts[k];
    const int32_t row0 = step.rowStart[first];
    m.firstSeq = first;
    m.rowStart.resize(size_t(n));
    int32_t tokens = 0;
    for (int32_t i = 0; i < n; ++i) {
      m.rowStart[size_t(i)] = step.rowStart[first + i] - row0;
      tokens += step.rowCount[first + i];
    }
    StepArrays &a = m.arrays;
    a.numSeqs = n;
    a.numTokens = tokens;
    a.maxBlocks = step.maxBlocks;
    a.numCopies = k == 0 ? step.numCopies : 0;
    a.rowStart = m.rowStart.data();
    a.rowCount = step.rowCount + first;
    a.pos = step.pos + first;
    a.blockTables = step.blockTables + int64_t(first) * step.maxBlocks;
    a.tokens = step.tokens + row0;
    a.positions = step.positions + row0;
    a.copySrc = step.copySrc;
    a.copyDst = step.copyDst;
  }
  return out;
}

void CpuStepper::run(const StepArrays &step, float *logits, void *comm) {
  // Copy-on-write: the rows of a shared block a sequence now writes.
  const size_t B = size_t(blockTokens_);
  for (int32_t i = 0; i < step.numCopies; ++i)
    for (const kiln_paged_kv &kv : kvPages_) {
      auto copyRows = [&](void *pool, size_t rowBytes) {
        auto *p = static_cast<uint8_t *>(pool);
        std::memcpy(p + size_t(step.copyDst[i]) * B * rowBytes,
                    p + size_t(step.copySrc[i]) * B * rowBytes, B * rowBytes);
      };
      copyRows(kv.k_pool, kvRowBytes_);
      copyRows(kv.v_pool, kvRowBytes_);
      if (kv.k_scales) {
        copyRows(kv.k_scales, scaleRowBytes_);
        copyRows(kv.v_scales, scaleRowBytes_);
      }
    }
  kiln_batch batch{};
  batch.num_seqs = step.numSeqs;
  batch.max_blocks = step.maxBlocks;
  batch.row_start = step.rowStart;
  batch.row_count = step.rowCount;
  batch.pos = step.pos;
  batch.block_tables = step.blockTables;
  batch.positions = step.positions;
  batch.logit_count = step.logitCount;
  batch.num_logit_rows = step.numLogitRows;
  kiln_exec_ctx ctx{};
  ctx.arena = arena_;
  ctx.weights = artifact_.weights();
  ctx.tokens = step.tokens;
  ctx.logits = logits;
  ctx.batch = &batch;
  ctx.kv_pages = kvPages_.data();
  ctx.comm = comm;
  artifact_.step()(&ctx, step.numTokens, 0);
}

} // namespace kiln::rt::serve
