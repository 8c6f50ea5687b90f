//===- ArtifactFuzzer.cpp - libFuzzer target: artifact manifest/loader ----===//
//
// Input: parts separated by kPartSeparator (FuzzUtils.h): 0 manifest.json,
// 1 the tokenizer file. parseManifest() runs on part 0; if it accepts a
// "cpu" artifact, a directory is made from it: manifest.json, part 1 under
// the manifest's tokenizer.file name, and every other file the manifest
// lists as a sparse file of zeros of the listed size (at most 64 MiB), and
// Artifact::open() loads it (checksums verified when the manifest text
// starts with a space). model.so is then zeros, never fuzzed bytes, so the
// dlopen() at the end of loading always fails: everything before it is what
// this target covers. The executors are stubs (below): a "cuda" artifact
// stops where a machine without a GPU stops.
//
//===----------------------------------------------------------------------===//

#include "FuzzUtils.h"

#include "artifact/Artifact.h"
#include "comm/Comm.h"
#include "comm/ParallelExecutor.h"
#include "cuda/CudaBackend.h"
#include "session/Executor.h"

#include <cstdlib>

using namespace kiln::rt;

// Only the loader is linked (CMakeLists.txt): the executors it refers to are
// stubs here. Loading never runs the CPU executor; opening the CUDA backend
// fails at once, where a machine without a GPU would fail too.
namespace kiln::rt {
Status createCpuExecutor(const Artifact &, std::unique_ptr<Executor> &) {
  return internalError("kiln-fuzz-artifact has no CPU executor");
}
CudaBackend::~CudaBackend() = default;
Status CudaBackend::open(const std::string &dir,
                         std::unique_ptr<CudaBackend> &) {
  return unimplemented(dir + ": kiln-fuzz-artifact has no CUDA backend");
}
Status CudaBackend::createModel(const kiln_cudaexec_model_desc_t &) {
  return unimplemented("kiln-fuzz-artifact has no CUDA backend");
}
Status CudaBackend::createExecutor(std::unique_ptr<Executor> &) const {
  return unimplemented("kiln-fuzz-artifact has no CUDA backend");
}
Status CudaBackend::memcpyBandwidth(uint64_t, int32_t, double &) const {
  return unimplemented("kiln-fuzz-artifact has no CUDA backend");
}
Status CudaBackend::ncclUniqueId(uint8_t *) const {
  return unimplemented("kiln-fuzz-artifact has no CUDA backend");
}
// No rank group: a partitioned manifest is refused after parsing, as in a
// process not launched by mpirun.
Communicator *processGroup() { return nullptr; }
Status Communicator::broadcast(void *, int64_t, int32_t, const char *, bool) {
  return internalError("kiln-fuzz-artifact has no rank group");
}
Status Communicator::allGather(const void *, void *, int64_t, const char *,
                               bool) {
  return internalError("kiln-fuzz-artifact has no rank group");
}
void Communicator::abort(const std::string &, int32_t code) { std::_Exit(code); }
Status Communicator::setPipeline(int32_t, int32_t) {
  return internalError("kiln-fuzz-artifact has no rank group");
}
bool launchedAsRank() { return false; }
Status createParallelExecutor(const Artifact &, Communicator &,
                              std::unique_ptr<Executor>,
                              std::unique_ptr<Executor> &) {
  return internalError("kiln-fuzz-artifact has no rank group");
}
void endFollowers(Communicator &) {}
} // namespace kiln::rt

/// Listed files larger than this are not created (the loader then reports
/// them missing).
static constexpr uint64_t kMaxFileBytes = uint64_t(64) << 20;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string_view> parts = kiln::fuzz::splitParts(data, size, 2);
  kiln::fuzz::ScratchDir &dir = kiln::fuzz::ScratchDir::get();
  dir.clear();
  std::string text(parts[0]);
  Manifest manifest;
  if (!parseManifest(text, dir.path(), manifest).isOk())
    return 0;
  dir.write("manifest.json", text);
  dir.write(manifest.tokenizerFile, parts[1]);
  for (const ArtifactFile &f : manifest.files)
    if (f.name != "manifest.json" && f.name != manifest.tokenizerFile &&
        f.bytes <= kMaxFileBytes)
      dir.writeZeros(f.name, f.bytes);
  std::unique_ptr<Artifact> artifact;
  OpenOptions options;
  options.verifyChecksums = !text.empty() && text[0] == ' ';
  (void)Artifact::open(dir.path(), options, artifact);
  return 0;
}
