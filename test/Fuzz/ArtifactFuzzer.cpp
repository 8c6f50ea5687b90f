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
// this target covers. "cuda" artifacts stop after parseManifest() (opening
// them initialises CUDA).
//
//===----------------------------------------------------------------------===//

#include "FuzzUtils.h"

#include "artifact/Artifact.h"
#include "session/Executor.h"

using namespace kiln::rt;

namespace kiln::rt {
/// Artifact::createExecutor() needs this; loading never calls it, and the
/// CPU kernels are not linked into this target.
Status createCpuExecutor(const Artifact &, std::unique_ptr<Executor> &) {
  return internalError("kiln-fuzz-artifact has no CPU executor");
}
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
  if (!parseManifest(text, dir.path(), manifest).isOk() ||
      manifest.target != Target::Cpu)
    return 0;
  dir.write("manifest.json", text);
  dir.write(manifest.tokenizerFile, parts[1]);
  for (const ArtifactFile &f : manifest.files)
    if (f.name != "manifest.json" && f.name != manifest.tokenizerFile &&
        f.bytes <= kMaxFileBytes)
      dir.writeZeros(f.name, f.bytes);
  std::unique_ptr<Artifact> artifact;
  bool verify = !text.empty() && text[0] == ' ';
  (void)Artifact::open(dir.path(), verify, artifact);
  return 0;
}
