//===- Artifact.cpp - Loading and validating a Kiln artifact ------*- C++ -*-===//
//
// Validation order: manifest.json (a regular file, size-limited) is read;
// with trusted keys, manifest.sig must verify against those exact bytes;
// the manifest parses: format/version/abi_version/target; required fields
// and their ranges; KV-cache byte count; weight table (64-byte alignment,
// bounds); every listed file is a regular file (symbolic links refused, not
// followed) with the listed size and XXH3-64 (and BLAKE2b-256 when signed);
// then weights.bin is mmap'd and tokenizer.json parsed from the descriptors
// and bytes that were checked, and only then is model.so dlopen()ed and its
// kiln_plan_info compared with the manifest and the size of weights.bin.
// Each error names ARTIFACT/<file> and the field or offset.
//
//===----------------------------------------------------------------------===//
#include "artifact/Artifact.h"
#include "comm/Comm.h"
#include "comm/ParallelExecutor.h"

#include "cuda/CudaBackend.h"
#include "session/Executor.h"
#include "sign/Signing.h"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>

using json = nlohmann::json;

namespace kiln::rt {

static constexpr uint64_t kWeightAlignment = 64;
/// Arena sizes above this are treated as a corrupted manifest.
static constexpr uint64_t kMaxArenaBytes = uint64_t(1) << 40;

namespace {
/// Typed access to dotted manifest fields with messages naming the field.
class ManifestReader {
public:
  ManifestReader(const json &root, std::string where)
      : root_(root), where_(std::move(where)) {}

  Status error(const std::string &what) const {
    return dataLoss(where_ + ": " + what);
  }

  Status node(const std::string &dotted, const json *&out) const {
    const json *cur = &root_;
    std::stringstream ss(dotted);
    std::string key;
    while (std::getline(ss, key, '.')) {
      if (!cur->is_object() || !cur->contains(key))
        return error("missing field '" + dotted + "'");
      cur = &(*cur)[key];
    }
    out = cur;
    return Status::ok();
  }

  Status getString(const std::string &dotted, std::string &out) const {
    const json *n = nullptr;
    KILN_RT_RETURN_IF_ERROR(node(dotted, n));
    if (!n->is_string())
      return error("field '" + dotted + "' must be a string, got " + n->dump());
    out = n->get<std::string>();
    return Status::ok();
  }

  /// An integer in [minValue, maxValue].
  Status getInt(const std::string &dotted, int64_t minValue, int64_t maxValue,
                int64_t &out) const {
    const json *n = nullptr;
    KILN_RT_RETURN_IF_ERROR(node(dotted, n));
    return toInt(*n, dotted, minValue, maxValue, out);
  }

  Status getUInt(const std::string &dotted, uint64_t &out) const {
    const json *n = nullptr;
    KILN_RT_RETURN_IF_ERROR(node(dotted, n));
    return toUInt(*n, dotted, out);
  }

  Status toInt(const json &n, const std::string &dotted, int64_t minValue,
               int64_t maxValue, int64_t &out) const {
    if (!n.is_number_integer())
      return error("field '" + dotted + "' must be an integer, got " + n.dump());
    if (n.is_number_unsigned() && n.get<uint64_t>() > uint64_t(INT64_MAX))
      return error("field '" + dotted + "' is out of range: " + n.dump());
    int64_t v = n.get<int64_t>();
    if (v < minValue || v > maxValue)
      return error("field '" + dotted + "' is " + std::to_string(v) +
                   ", expected a value in [" + std::to_string(minValue) + ", " +
                   std::to_string(maxValue) + "]");
    out = v;
    return Status::ok();
  }

  Status toUInt(const json &n, const std::string &dotted, uint64_t &out) const {
    if (!n.is_number_integer() || (!n.is_number_unsigned() && n.get<int64_t>() < 0))
      return error("field '" + dotted + "' must be a non-negative integer, got " +
                   n.dump());
    out = n.get<uint64_t>();
    return Status::ok();
  }

private:
  const json &root_;
  std::string where_;
};
} // namespace

uint64_t dtypeBytes(const std::string &dtype) {
  if (dtype == "f32")
    return 4;
  if (dtype == "f16" || dtype == "bf16")
    return 2;
  return 0;
}

/// Bytes per element of a weights.tensors[] dtype: the element types of
/// dtypeBytes plus "i8" (int8 W8A16 weights of kiln.quantized_linear, whose
/// float32 scales are separate "f32" tensors). Same for both targets.
static uint64_t tensorDtypeBytes(const std::string &dtype) {
  if (dtype == "i8")
    return 1;
  return dtypeBytes(dtype);
}

static bool isHex16(const std::string &s) {
  return s.size() == 16 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

static bool isPlainFileName(const std::string &s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos;
}

/// "stage<S>/manifest.json": a pipeline stage's manifest, listed in stage
/// 0's (S a decimal number without leading zeros, >= 1).
static bool isStageManifestName(const std::string &s) {
  const std::string prefix = "stage", suffix = "/manifest.json";
  if (s.size() <= prefix.size() + suffix.size() || s.rfind(prefix, 0) != 0 ||
      s.compare(s.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  const std::string digits =
      s.substr(prefix.size(), s.size() - prefix.size() - suffix.size());
  return !digits.empty() && digits.size() <= 4 && digits[0] != '0' &&
         std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; });
}

Status parseManifest(const std::string &text, const std::string &dir,
                     Manifest &out) {
  const std::string where = dir + "/manifest.json";
  json root;
  try {
    root = json::parse(text);
  } catch (const json::parse_error &e) {
    std::string what = e.what();
    // Drop nlohmann's "[json.exception.parse_error.101] " tag.
    if (auto p = what.find("] "); p != std::string::npos && what[0] == '[')
      what = what.substr(p + 2);
    return dataLoss(where + ": invalid JSON at byte " + std::to_string(e.byte) +
                    ": " + what);
  } catch (const json::exception &e) {
    // Parsing throws other errors too, e.g. out_of_range for "1e400".
    return dataLoss(where + ": invalid JSON: " + e.what());
  }
  if (!root.is_object())
    return dataLoss(where + ": top level must be a JSON object");
  ManifestReader r(root, where);

  std::string format;
  KILN_RT_RETURN_IF_ERROR(r.getString("format", format));
  if (format != "kiln-artifact")
    return unimplemented(where + ": format is \"" + format +
                         "\", expected \"kiln-artifact\" (not a Kiln artifact)");
  const json *n = nullptr;
  KILN_RT_RETURN_IF_ERROR(r.node("version", n));
  if (!n->is_number_integer() || n->get<int64_t>() != 1)
    return unimplemented(where + ": unsupported artifact version " + n->dump() +
                         " (this runtime reads version 1)");
  std::string target;
  KILN_RT_RETURN_IF_ERROR(r.getString("target", target));
  if (target == "cpu")
    out.target = Target::Cpu;
  else if (target == "cuda")
    out.target = Target::Cuda;
  else
    return unimplemented(where + ": target \"" + target +
                         "\" is not supported (this runtime runs \"cpu\" and "
                         "\"cuda\")");
  out.targetName = target;
  // abi_version is the kernel ABI (kernel_abi.h) for cpu, the CUDA ABI
  // (cuda_abi.h) for cuda.
  const bool cuda = out.target == Target::Cuda;
  const int64_t abi = cuda ? KILN_CUDA_ABI_VERSION : KILN_ABI_VERSION;
  KILN_RT_RETURN_IF_ERROR(r.node("abi_version", n));
  if (!n->is_number_integer() || n->get<int64_t>() != abi)
    return unimplemented(
        where + ": abi_version " + n->dump() + " does not match this runtime's " +
        (cuda ? "CUDA" : "kernel") + " ABI version " + std::to_string(abi) +
        " (recompile the artifact with a matching kiln-compile)");

  // recipe.dtype: element type of weights and activations (default f32).
  if (root.contains("recipe") && root["recipe"].is_object() &&
      root["recipe"].contains("dtype"))
    KILN_RT_RETURN_IF_ERROR(r.getString("recipe.dtype", out.dtype));
  if (root.contains("recipe") && root["recipe"].is_object() &&
      root["recipe"].contains("quant"))
    KILN_RT_RETURN_IF_ERROR(r.getString("recipe.quant", out.quant));
  // Both targets run f32, f16 and bf16 (kernel_abi.h has 16-bit kernels).
  if (!dtypeBytes(out.dtype))
    return unimplemented(where + ": recipe.dtype \"" + out.dtype +
                         "\" is not supported (expected \"f32\", \"f16\" or "
                         "\"bf16\")");

  // model
  if (root.contains("model") && root["model"].contains("name") &&
      root["model"]["name"].is_string())
    out.modelName = root["model"]["name"].get<std::string>();
  KILN_RT_RETURN_IF_ERROR(r.getInt("model.vocab_size", 1, INT32_MAX, out.vocabSize));
  KILN_RT_RETURN_IF_ERROR(
      r.getInt("model.max_seq_len", 1, INT32_MAX, out.maxSeqLen));

  // runtime
  KILN_RT_RETURN_IF_ERROR(r.getUInt("runtime.arena_bytes", out.arenaBytes));
  if (out.arenaBytes > kMaxArenaBytes)
    return r.error("field 'runtime.arena_bytes' is " +
                   std::to_string(out.arenaBytes) +
                   ", implausibly large (limit 1 TiB)");
  KILN_RT_RETURN_IF_ERROR(r.getInt("runtime.max_prefill_tokens", 1, INT32_MAX,
                                   out.maxPrefillTokens));
  KILN_RT_RETURN_IF_ERROR(
      r.getString("runtime.entry_points.prefill", out.prefillEntry));
  KILN_RT_RETURN_IF_ERROR(
      r.getString("runtime.entry_points.decode", out.decodeEntry));
  if (out.prefillEntry.empty() || out.decodeEntry.empty())
    return r.error("runtime.entry_points names must not be empty");
  if (root["runtime"]["entry_points"].contains("step")) {
    KILN_RT_RETURN_IF_ERROR(
        r.getString("runtime.entry_points.step", out.stepEntry));
    if (out.stepEntry.empty())
      return r.error("runtime.entry_points.step must not be empty");
  }
  if (root["runtime"]["entry_points"].contains("verify")) {
    KILN_RT_RETURN_IF_ERROR(
        r.getString("runtime.entry_points.verify", out.verifyEntry));
    if (out.verifyEntry.empty())
      return r.error("runtime.entry_points.verify must not be empty");
  }
  KILN_RT_RETURN_IF_ERROR(
      r.getInt("runtime.kv_cache.layers", 1, 1 << 20, out.kvLayers));
  KILN_RT_RETURN_IF_ERROR(
      r.getInt("runtime.kv_cache.kv_heads", 1, 1 << 20, out.kvHeads));
  KILN_RT_RETURN_IF_ERROR(
      r.getInt("runtime.kv_cache.head_dim", 1, 1 << 20, out.kvHeadDim));
  KILN_RT_RETURN_IF_ERROR(
      r.getInt("runtime.kv_cache.max_seq", 1, INT32_MAX, out.kvMaxSeq));
  std::string kvDtype;
  KILN_RT_RETURN_IF_ERROR(r.getString("runtime.kv_cache.dtype", kvDtype));
  // Quantized caches: int8, or FP8 E4M3FN bytes ("fp8_e4m3").
  bool kvInt8 = kvDtype == "int8" || kvDtype == "fp8_e4m3";
  if (!dtypeBytes(kvDtype) && !kvInt8)
    return unimplemented(where + ": runtime.kv_cache.dtype \"" + kvDtype +
                         "\" is not supported (expected \"f32\", \"f16\", "
                         "\"bf16\", \"int8\" or \"fp8_e4m3\")");
  out.kvDtype = kvDtype;
  // int8 and fp8_e4m3 caches also hold one f32 scale per (token, kv head) for
  // keys and for values: 4 more bytes per head_dim elements.
  const uint64_t kvElem = kvInt8 ? 1 : dtypeBytes(kvDtype);
  KILN_RT_RETURN_IF_ERROR(r.getUInt("runtime.kv_cache.bytes", out.kvBytes));
  // Products stay below 2^63: each factor is bounded above.
  unsigned __int128 expected =
      (unsigned __int128)out.kvLayers * 2 * uint64_t(out.kvMaxSeq) *
      uint64_t(out.kvHeads) * (uint64_t(out.kvHeadDim) * kvElem + (kvInt8 ? 4 : 0));
  // Optional: the pages' f32 key minimum and maximum (key summaries for
  // sparse decode), ceil(max_seq / B) pages per layer.
  int64_t summaryBlock = 0;
  if (root["runtime"]["kv_cache"].is_object() &&
      root["runtime"]["kv_cache"].contains("key_summary_block"))
    KILN_RT_RETURN_IF_ERROR(r.getInt("runtime.kv_cache.key_summary_block", 0,
                                     4096, summaryBlock));
  if (summaryBlock > 0)
    expected += (unsigned __int128)out.kvLayers * 2 *
                uint64_t((out.kvMaxSeq + summaryBlock - 1) / summaryBlock) *
                uint64_t(out.kvHeads) * uint64_t(out.kvHeadDim) * 4;
  if (expected != out.kvBytes)
    return r.error("runtime.kv_cache.bytes is " + std::to_string(out.kvBytes) +
                   " but layers * 2 * max_seq * kv_heads * head_dim * " +
                   std::to_string(kvElem) +
                   (kvInt8 ? " (+ 4-byte scales per kv head)" : "") +
                   (summaryBlock > 0
                        ? " + the key summaries (2 f32 rows per page of " +
                              std::to_string(summaryBlock) + " positions)"
                        : std::string()) +
                   " = " + std::to_string(uint64_t(expected)));

  // files
  KILN_RT_RETURN_IF_ERROR(r.node("files", n));
  if (!n->is_object())
    return r.error("field 'files' must be an object");
  for (auto it = n->begin(); it != n->end(); ++it) {
    ArtifactFile f;
    f.name = it.key();
    if (!isPlainFileName(f.name) && !isStageManifestName(f.name))
      return r.error("files entry \"" + f.name +
                     "\" is not a plain file name inside the artifact");
    // File names contain dots: address the entry directly, not by path.
    const json &e = it.value();
    std::string at = "files[\"" + f.name + "\"]";
    if (!e.is_object() || !e.contains("bytes") || !e.contains("xxh3_64"))
      return r.error("field '" + at + "' needs 'bytes' and 'xxh3_64'");
    KILN_RT_RETURN_IF_ERROR(r.toUInt(e["bytes"], at + ".bytes", f.bytes));
    if (!e["xxh3_64"].is_string())
      return r.error("field '" + at + ".xxh3_64' must be a string");
    f.xxh3 = e["xxh3_64"].get<std::string>();
    if (!isHex16(f.xxh3))
      return r.error("field '" + at + ".xxh3_64' is \"" + f.xxh3 +
                     "\", expected 16 lowercase hex digits");
    // blake2b_256 (BLAKE2b-256, 64 lowercase hex digits): optional, but
    // required when a signature is (docs/security.md).
    if (e.contains("blake2b_256")) {
      if (!e["blake2b_256"].is_string() ||
          !sign::isLowerHex(e["blake2b_256"].get<std::string>(),
                            2 * sign::kBlake2bBytes))
        return r.error("field '" + at + ".blake2b_256' is " +
                       e["blake2b_256"].dump() +
                       ", expected 64 lowercase hex digits");
      f.blake2b = e["blake2b_256"].get<std::string>();
    }
    out.files.push_back(std::move(f));
  }
  auto findFile = [&](const std::string &name) -> const ArtifactFile * {
    for (const ArtifactFile &f : out.files)
      if (f.name == name)
        return &f;
    return nullptr;
  };

  KILN_RT_RETURN_IF_ERROR(r.getString("weights.file", out.weightsFile));
  KILN_RT_RETURN_IF_ERROR(r.getString("tokenizer.file", out.tokenizerFile));
  for (const std::string &required :
       {std::string("model.so"), out.weightsFile, out.tokenizerFile})
    if (!findFile(required))
      return r.error("'files' does not list \"" + required +
                     "\" (its size and checksum are required)");
  uint64_t weightsSize = findFile(out.weightsFile)->bytes;

  // parallel (optional): {"tp": N, "weights": [FILE of rank 0, ...]}, the
  // shards of a partitioned plan; weights.file is rank 0's.
  if (root.contains("parallel")) {
    const json &p = root["parallel"];
    if (!p.is_object() || !p.contains("tp") || !p["tp"].is_number_integer() ||
        p["tp"].get<int64_t>() < 1 || p["tp"].get<int64_t>() > 4096)
      return r.error("field 'parallel' must be an object with an integer "
                     "'tp' in [1, 4096]");
    out.tp = p["tp"].get<int64_t>();
    if (!p.contains("weights") || !p["weights"].is_array() ||
        int64_t(p["weights"].size()) != out.tp)
      return r.error("field 'parallel.weights' must list tp = " +
                     std::to_string(out.tp) +
                     " weight files, one per rank");
    for (size_t i = 0; i < p["weights"].size(); ++i) {
      const json &f = p["weights"][i];
      std::string at = "parallel.weights[" + std::to_string(i) + "]";
      if (!f.is_string())
        return r.error("field '" + at + "' must be a file name");
      const ArtifactFile *listed = findFile(f.get<std::string>());
      if (!listed)
        return r.error("'files' does not list \"" + f.get<std::string>() +
                       "\" (" + at + "; its size and checksum are required)");
      if (listed->bytes != weightsSize)
        return r.error(at + " \"" + listed->name + "\" has " +
                       std::to_string(listed->bytes) + " bytes but " +
                       out.weightsFile + " has " +
                       std::to_string(weightsSize) +
                       ": every rank's shard has the same layout");
      if (std::find(out.rankWeightsFiles.begin(), out.rankWeightsFiles.end(),
                    f.get<std::string>()) != out.rankWeightsFiles.end())
        return r.error("field '" + at + "' names \"" + f.get<std::string>() +
                       "\" again: every rank has its own shard");
      out.rankWeightsFiles.push_back(f.get<std::string>());
    }
    if (out.rankWeightsFiles.front() != out.weightsFile)
      return r.error("field 'parallel.weights[0]' must be weights.file (\"" +
                     out.weightsFile + "\")");
    // Pipeline stages (optional): {"pp": M, "stage": S, "stages": [DIR of
    // stage 1, ...]} (stages: stage 0's manifest only).
    auto intIn = [&](const char *key, int64_t lo, int64_t hi,
                     int64_t &value) -> Status {
      if (!p.contains(key))
        return Status::ok();
      if (!p[key].is_number_integer() || p[key].get<int64_t>() < lo ||
          p[key].get<int64_t>() > hi)
        return r.error("field 'parallel." + std::string(key) +
                       "' must be an integer in [" + std::to_string(lo) +
                       ", " + std::to_string(hi) + "]");
      value = p[key].get<int64_t>();
      return Status::ok();
    };
    KILN_RT_RETURN_IF_ERROR(intIn("pp", 1, 4096, out.pp));
    KILN_RT_RETURN_IF_ERROR(intIn("stage", 0, out.pp - 1, out.stage));
    if (out.tp * out.pp > 4096)
      return r.error("fields 'parallel.tp' x 'parallel.pp' must be at most "
                     "4096 ranks");
    if (p.contains("stages")) {
      const json &st = p["stages"];
      if (out.stage != 0)
        return r.error("field 'parallel.stages' belongs to stage 0's "
                       "manifest, but 'parallel.stage' is " +
                       std::to_string(out.stage));
      if (!st.is_array() ||
          int64_t(st.size()) != out.pp - 1)
        return r.error("field 'parallel.stages' must list pp - 1 = " +
                       std::to_string(out.pp - 1) +
                       " stage directories, in stage 0's manifest");
      for (size_t i = 0; i < st.size(); ++i) {
        const std::string want = "stage" + std::to_string(i + 1);
        if (!st[i].is_string() || st[i].get<std::string>() != want)
          return r.error("field 'parallel.stages[" + std::to_string(i) +
                         "]' must be \"" + want + "\"");
        if (!findFile(want + "/manifest.json"))
          return r.error("'files' does not list \"" + want +
                         "/manifest.json\" (parallel.stages; its size and "
                         "checksum are required)");
        out.stageDirs.push_back(want);
      }
    } else if (out.stage == 0 && out.pp > 1) {
      return r.error("field 'parallel.stages' is required when "
                     "'parallel.pp' > 1 (stage 0's manifest names the "
                     "others)");
    }
  }

  KILN_RT_RETURN_IF_ERROR(r.node("weights.tensors", n));
  if (!n->is_array())
    return r.error("field 'weights.tensors' must be an array");
  for (size_t i = 0; i < n->size(); ++i) {
    const json &t = (*n)[i];
    std::string at = "weights.tensors[" + std::to_string(i) + "]";
    if (!t.is_object())
      return r.error("field '" + at + "' must be an object");
    WeightTensor w;
    if (t.contains("name") && t["name"].is_string())
      w.name = t["name"].get<std::string>();
    if (!t.contains("offset") || !t.contains("bytes"))
      return r.error("field '" + at + "' needs 'offset' and 'bytes'");
    KILN_RT_RETURN_IF_ERROR(r.toUInt(t["offset"], at + ".offset", w.offset));
    KILN_RT_RETURN_IF_ERROR(r.toUInt(t["bytes"], at + ".bytes", w.bytes));
    std::string label = at + " (\"" + w.name + "\")";
    if (w.offset % kWeightAlignment != 0)
      return r.error(label + ": offset " + std::to_string(w.offset) +
                     " is not a multiple of 64");
    if (w.offset > weightsSize || w.bytes > weightsSize - w.offset)
      return r.error(label + ": bytes [" + std::to_string(w.offset) + ", " +
                     std::to_string(w.offset + w.bytes) + ") exceed " +
                     out.weightsFile + " size " + std::to_string(weightsSize));
    if (t.contains("dtype")) {
      if (!t["dtype"].is_string() ||
          !tensorDtypeBytes(t["dtype"].get<std::string>()))
        return r.error(label + ": dtype " + t["dtype"].dump() +
                       " is not one of \"f32\", \"f16\", \"bf16\", \"i8\"");
      w.dtype = t["dtype"].get<std::string>();
    }
    if (t.contains("shape") && t["shape"].is_array() && !w.dtype.empty()) {
      unsigned __int128 elems = 1;
      for (const json &d : t["shape"]) {
        if (!d.is_number_unsigned())
          return r.error(label + ": shape " + t["shape"].dump() +
                         " must hold non-negative integers");
        elems *= d.get<uint64_t>();
      }
      if (elems * tensorDtypeBytes(w.dtype) != w.bytes)
        return r.error(label + ": bytes " + std::to_string(w.bytes) +
                       " do not match shape " + t["shape"].dump() + " of " +
                       w.dtype);
    }
    out.tensors.push_back(std::move(w));
  }

  // chat (optional): {"template": FILE, "end_of_turn_ids": [...],
  // "bos_token": "...", "eos_token": "..."}.
  if (root.contains("chat")) {
    const json &c = root["chat"];
    if (!c.is_object())
      return r.error("field 'chat' must be an object");
    if (c.contains("template")) {
      if (!c["template"].is_string())
        return r.error("field 'chat.template' must be a string");
      out.chatTemplateFile = c["template"].get<std::string>();
      if (!findFile(out.chatTemplateFile))
        return r.error("'files' does not list \"" + out.chatTemplateFile +
                       "\" (chat.template; its size and checksum are "
                       "required)");
    }
    if (c.contains("end_of_turn_ids")) {
      const json &ids = c["end_of_turn_ids"];
      if (!ids.is_array() || ids.empty() || ids.size() > 64)
        return r.error("field 'chat.end_of_turn_ids' must be an array of 1 "
                       "to 64 token ids");
      for (size_t i = 0; i < ids.size(); ++i) {
        if (!ids[i].is_number_integer() || ids[i].get<int64_t>() < 0 ||
            ids[i].get<int64_t>() >= out.vocabSize)
          return r.error("field 'chat.end_of_turn_ids[" + std::to_string(i) +
                         "]' is " + ids[i].dump() +
                         ", expected a token id in [0, " +
                         std::to_string(out.vocabSize) + ")");
        out.endOfTurnIds.push_back(int32_t(ids[i].get<int64_t>()));
      }
    }
    for (const char *key : {"bos_token", "eos_token"})
      if (c.contains(key)) {
        if (!c[key].is_string())
          return r.error(std::string("field 'chat.") + key +
                         "' must be a string");
        (std::string(key) == "bos_token" ? out.bosToken : out.eosToken) =
            c[key].get<std::string>();
      }
  }
  return Status::ok();
}

static std::string errnoText() { return std::strerror(errno); }

/// Largest manifest.json read (a 70B model's lists ~700 tensors: ~150 KB).
static constexpr uint64_t kMaxManifestBytes = uint64_t(64) << 20;
/// Largest tokenizer.json read: the limit of Tokenizer::load (Tokenizer.cpp)
/// and kiln-compile's TokenizerWriter (a 256k-piece vocabulary is ~20 MB).
static constexpr uint64_t kMaxTokenizerBytes = uint64_t(512) << 20;
/// Largest chat_template.jinja read (kiln-compile's limit too).
static constexpr uint64_t kMaxChatTemplateBytes = uint64_t(1) << 20;
/// Largest model.so copied into memory to be loaded (signed artifacts).
static constexpr uint64_t kMaxSignedCodeBytes = uint64_t(4) << 30;

/// What a non-regular file is, for messages.
static std::string fileKind(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISSOCK(mode))
    return "a socket";
  return "not a regular file";
}

static void closeFd(int &fd) {
  if (fd >= 0)
    ::close(fd);
  fd = -1;
}

namespace {
/// The hashes of one file's bytes: XXH3-64 and, for signed artifacts,
/// BLAKE2b-256.
class FileHasher {
public:
  FileHasher(bool blake2b) : state_(XXH3_createState()) {
    XXH3_64bits_reset(state_);
    if (blake2b)
      blake_ = std::make_unique<sign::Blake2b>();
  }
  ~FileHasher() { XXH3_freeState(state_); }
  FileHasher(const FileHasher &) = delete;
  FileHasher &operator=(const FileHasher &) = delete;

  void update(const void *data, size_t n) {
    XXH3_64bits_update(state_, data, n);
    if (blake_)
      blake_->update(data, n);
  }

  /// Compares the digests with the manifest entry `f` of file `path`.
  Status check(const std::string &path, const ArtifactFile &f) {
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx",
                  (unsigned long long)XXH3_64bits_digest(state_));
    if (hex != f.xxh3)
      return dataLoss(path + ": XXH3-64 is " + hex + ", manifest says " +
                      f.xxh3 + " (corrupted artifact)");
    if (blake_) {
      std::string b = blake_->hexDigest();
      if (b != f.blake2b)
        return dataLoss(path + ": BLAKE2b-256 is " + b + ", manifest says " +
                        f.blake2b + " (altered or corrupted artifact)");
    }
    return Status::ok();
  }

private:
  XXH3_state_t *state_;
  std::unique_ptr<sign::Blake2b> blake_;
};
} // namespace

/// Feeds all of `fd` (from offset 0) to `hasher`.
static Status hashFd(int fd, const std::string &path, FileHasher &hasher) {
  std::vector<char> buf(size_t(8) << 20);
  for (off_t at = 0;;) {
    ssize_t got = ::pread(fd, buf.data(), buf.size(), at);
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return dataLoss(path + ": read error: " + errnoText());
    if (got == 0)
      return Status::ok();
    hasher.update(buf.data(), size_t(got));
    at += got;
  }
}

Artifact::~Artifact() {
  // Rank 0 of a partitioned artifact: the other ranks stop following.
  if (group_ && group_->rank() == 0)
    endFollowers(*group_);
  cuda_.reset(); // device memory and cuBLASLt before model.so goes away
  if (library_)
    dlclose(library_);
  if (mapping_)
    munmap(mapping_, mappingBytes_);
  closeFd(dirFd_);
  closeFd(weightsFd_);
  closeFd(modelFd_);
}

Status Artifact::createRankExecutor(std::unique_ptr<Executor> &out) const {
  if (cuda_)
    return cuda_->createExecutor(out);
  return createCpuExecutor(*this, out);
}

Status Artifact::createExecutor(std::unique_ptr<Executor> &out) const {
  if (!group_)
    return createRankExecutor(out);
  if (group_->rank() != 0)
    return failedPrecondition(
        "rank " + std::to_string(group_->rank()) + " of " + dir_ +
        "'s tensor-parallel group runs rank 0's sessions "
        "(kiln_rt_parallel_follow), it cannot create its own");
  std::unique_ptr<Executor> inner;
  KILN_RT_RETURN_IF_ERROR(createRankExecutor(inner));
  return createParallelExecutor(*this, *group_, std::move(inner), out);
}

Status Artifact::deviceBandwidth(uint64_t bytes, int32_t reps,
                                 double &out) const {
  if (!cuda_)
    return unimplemented(dir_ + " targets cpu: measure host memory bandwidth "
                                "instead");
  return cuda_->memcpyBandwidth(bytes, reps, out);
}

int64_t Artifact::contextLength() const {
  return std::min(manifest_.maxSeqLen, manifest_.kvMaxSeq);
}

Status Artifact::open(const std::string &dir, const OpenOptions &options,
                      std::unique_ptr<Artifact> &out) {
  std::unique_ptr<Artifact> a(new Artifact());
  a->dir_ = dir;
  while (a->dir_.size() > 1 && a->dir_.back() == '/')
    a->dir_.pop_back();
  Status loaded = a->load(options);
  // A rank group: every rank that joined it says whether it loaded, so
  // that no rank starts (rank 0 printing, serving) while another failed
  // (a stage's corrupted shard); the failed rank reports its own error.
  if (Communicator *group = a->group_) {
    const uint8_t mine = loaded.isOk() ? 1 : 0;
    std::vector<uint8_t> all(size_t(group->size()));
    Status gathered =
        group->allGather(&mine, all.data(), 1, "artifact loaded");
    if (!gathered.isOk())
      return loaded.isOk() ? gathered : loaded;
    if (loaded.isOk())
      for (size_t r = 0; r < all.size(); ++r)
        if (!all[r])
          return failedPrecondition(
              a->dir_ + ": rank " + std::to_string(r) +
              " could not load its part of the artifact (its error is on "
              "its stderr)");
  }
  KILN_RT_RETURN_IF_ERROR(loaded);
  out = std::move(a);
  return Status::ok();
}

Status Artifact::openMember(const std::string &name, int &fd, uint64_t &bytes,
                            const std::string &ifMissing) const {
  const std::string path = dir_ + "/" + name;
  // A stage's manifest: its directory must be a directory, not a link.
  if (size_t slash = name.find('/'); slash != std::string::npos) {
    struct stat dirSt;
    const std::string sub = name.substr(0, slash);
    if (::fstatat(dirFd_, sub.c_str(), &dirSt, AT_SYMLINK_NOFOLLOW) != 0)
      return notFound(dir_ + "/" + sub + ": " +
                      (errno == ENOENT
                           ? std::string("missing; manifest.json names it "
                                         "under 'parallel.stages'")
                           : errnoText()));
    if (!S_ISDIR(dirSt.st_mode))
      return dataLoss(dir_ + "/" + sub + ": " +
                      (S_ISLNK(dirSt.st_mode) ? std::string("a symbolic link")
                                              : fileKind(dirSt.st_mode)) +
                      ", not a directory; a pipeline stage is a directory "
                      "inside the artifact (links are not followed)");
  }
  // O_NOFOLLOW: a symbolic link fails with ELOOP instead of being followed;
  // O_NONBLOCK: opening a FIFO returns at once (fstat then refuses it).
  fd = ::openat(dirFd_, name.c_str(),
                O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ELOOP)
      return dataLoss(path + ": is a symbolic link; files inside an artifact "
                             "must be regular files (links are not followed)");
    if (errno == ENOENT)
      return notFound(path + ": " + ifMissing);
    return notFound(path + ": cannot open: " + errnoText());
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    Status s = dataLoss(path + ": cannot stat: " + errnoText());
    closeFd(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    closeFd(fd);
    return dataLoss(path + ": " + fileKind(st.st_mode) +
                    ", not a regular file; files inside an artifact must be "
                    "regular files");
  }
  bytes = uint64_t(st.st_size);
  return Status::ok();
}

Status Artifact::readMember(int fd, const std::string &name, uint64_t limit,
                            std::string &out) const {
  const std::string path = dir_ + "/" + name;
  out.clear();
  std::vector<char> buf(size_t(1) << 20);
  for (;;) {
    ssize_t got = ::pread(fd, buf.data(), buf.size(), off_t(out.size()));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0)
      return dataLoss(path + ": read error: " + errnoText());
    if (got == 0)
      return Status::ok();
    if (uint64_t(got) > limit - out.size())
      return dataLoss(path + ": larger than " + std::to_string(limit) +
                      " bytes, the most the runtime reads for this file");
    out.append(buf.data(), size_t(got));
  }
}

Status Artifact::verifySignature(const std::string &manifestText,
                                 const std::string &trustedKeys) {
  std::vector<sign::TrustedKey> keys;
  std::string error;
  if (!sign::loadTrustedKeys(trustedKeys, keys, error))
    return invalidArgument(error);
  const std::string name = sign::kSignatureFile;
  const std::string path = dir_ + "/" + name;
  int fd = -1;
  uint64_t bytes = 0;
  Status s = openMember(name, fd, bytes,
                        "missing: the artifact is not signed, and a signature "
                        "by a key in " + trustedKeys +
                        " is required (sign it with kiln-compile --sign-key)");
  if (!s.isOk())
    return permissionDenied(s.message());
  std::string sig;
  if (bytes != sign::kSignatureBytes) {
    closeFd(fd);
    return permissionDenied(path + ": " + std::to_string(bytes) +
                            " bytes, expected a 64-byte Ed25519 signature of "
                            "manifest.json (truncated or not a signature)");
  }
  s = readMember(fd, name, sign::kSignatureBytes, sig);
  closeFd(fd);
  if (!s.isOk())
    return permissionDenied(s.message());
  for (const sign::TrustedKey &k : keys)
    if (sign::verifyMessage(k.key, manifestText, sig)) {
      signatureVerified_ = true;
      return Status::ok();
    }
  return permissionDenied(
      path + ": not a valid signature of manifest.json by any of the " +
      std::to_string(keys.size()) + " trusted key" +
      (keys.size() == 1 ? "" : "s") + " in " + trustedKeys +
      " (signed with another key, or manifest.json was changed after "
      "signing)");
}

Status Artifact::checkFiles(const OpenOptions &options,
                            std::string &tokenizerText) {
  const bool signedArtifact = !options.trustedKeys.empty();
  const bool hash = options.verifyChecksums || signedArtifact;
  if (signedArtifact)
    for (const ArtifactFile &f : manifest_.files)
      if (f.blake2b.empty())
        return permissionDenied(
            dir_ + "/manifest.json: files[\"" + f.name +
            "\"] has no blake2b_256; the signature covers a file's contents "
            "only through it (recompile the artifact with kiln-compile "
            "--sign-key)");
  // Every listed file: a regular file (no links), listed size, listed hashes.
  for (const ArtifactFile &f : manifest_.files) {
    // Each rank reads its own weight shard only.
    if (f.name != manifest_.weightsFile &&
        std::find(manifest_.rankWeightsFiles.begin(),
                  manifest_.rankWeightsFiles.end(),
                  f.name) != manifest_.rankWeightsFiles.end())
      continue;
    const std::string path = dir_ + "/" + f.name;
    int fd = -1;
    uint64_t size = 0;
    KILN_RT_RETURN_IF_ERROR(openMember(
        f.name, fd, size,
        "missing (No such file or directory); manifest.json lists it under "
        "'files'"));
    struct Closer {
      int &fd;
      ~Closer() { closeFd(fd); }
    } closer{fd};
    if (size != f.bytes)
      return dataLoss(path + ": size " + std::to_string(size) +
                      " bytes, manifest says " + std::to_string(f.bytes) +
                      " (truncated or corrupted artifact)");
    const bool isModel = f.name == "model.so";
    const bool isTokenizer = f.name == manifest_.tokenizerFile;
    const bool isChat = f.name == manifest_.chatTemplateFile;
    // Read into memory what is used from memory, so that the bytes checked
    // are the bytes used: tokenizer.json, chat_template.jinja, and model.so
    // of a signed artifact (loaded from a sealed in-memory copy, see
    // loadModelLibrary).
    std::string *inMemory = isTokenizer ? &tokenizerText
                            : isChat    ? &chatTemplate_
                            : isModel && signedArtifact ? &modelCode_
                                                        : nullptr;
    FileHasher hasher(signedArtifact);
    if (inMemory) {
      uint64_t limit = isTokenizer ? kMaxTokenizerBytes
                       : isChat    ? kMaxChatTemplateBytes
                                   : kMaxSignedCodeBytes;
      if (size > limit)
        return dataLoss(path + ": " + std::to_string(size) +
                        " bytes, larger than the " + std::to_string(limit) +
                        "-byte limit for this file");
      KILN_RT_RETURN_IF_ERROR(readMember(fd, f.name, limit, *inMemory));
      if (inMemory->size() != f.bytes)
        return dataLoss(path + ": changed while being read");
      if (hash)
        hasher.update(inMemory->data(), inMemory->size());
    } else if (hash) {
      KILN_RT_RETURN_IF_ERROR(hashFd(fd, path, hasher));
    }
    if (hash)
      KILN_RT_RETURN_IF_ERROR(hasher.check(path, f));
    // Keep the descriptors of what is mapped or loaded later.
    if (f.name == manifest_.weightsFile)
      weightsFd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (isModel && !signedArtifact)
      modelFd_ = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
  }
  if (weightsFd_ < 0 || (!signedArtifact && modelFd_ < 0))
    return internalError(dir_ + ": cannot keep artifact files open: " +
                         errnoText());
  return Status::ok();
}

Status Artifact::enterStage(int32_t stage, const OpenOptions &options) {
  const std::string name = "stage" + std::to_string(stage) + "/manifest.json";
  const ArtifactFile *listed = nullptr;
  for (const ArtifactFile &f : manifest_.files)
    if (f.name == name)
      listed = &f;
  if (!listed || size_t(stage) > manifest_.stageDirs.size())
    return dataLoss(dir_ + "/manifest.json: pipeline stage " +
                    std::to_string(stage) + " is not listed");
  // The stage's manifest, checked against stage 0's listing (which the
  // signature, if any, covers): size and checksums.
  int fd = -1;
  uint64_t bytes = 0;
  KILN_RT_RETURN_IF_ERROR(openMember(
      name, fd, bytes,
      "missing; manifest.json lists it under 'files' (pipeline stage " +
          std::to_string(stage) + ")"));
  std::string text;
  Status s = bytes != listed->bytes
                 ? dataLoss(dir_ + "/" + name + ": size " +
                            std::to_string(bytes) + " bytes, manifest says " +
                            std::to_string(listed->bytes))
                 : readMember(fd, name, kMaxManifestBytes, text);
  closeFd(fd);
  KILN_RT_RETURN_IF_ERROR(s);
  FileHasher hasher(!options.trustedKeys.empty() || !listed->blake2b.empty());
  hasher.update(text.data(), text.size());
  KILN_RT_RETURN_IF_ERROR(hasher.check(dir_ + "/" + name, *listed));
  const std::string stageDir = dir_ + "/" + manifest_.stageDirs[stage - 1];
  Manifest m;
  KILN_RT_RETURN_IF_ERROR(parseManifest(text, stageDir, m));
  // What every stage must share with stage 0: the model, the recipe, the
  // context and token limits the ranks check commands against, and the
  // entry points rank 0 drives.
  std::string differs;
  auto same = [&](const char *field, const auto &a, const auto &b) {
    if (differs.empty() && !(a == b))
      differs = field;
  };
  same("model.max_seq_len", m.maxSeqLen, manifest_.maxSeqLen);
  same("runtime.kv_cache.max_seq", m.kvMaxSeq, manifest_.kvMaxSeq);
  same("runtime.max_prefill_tokens", m.maxPrefillTokens,
       manifest_.maxPrefillTokens);
  same("recipe.dtype", m.dtype, manifest_.dtype);
  same("recipe.quant", m.quant, manifest_.quant);
  same("runtime.kv_cache.dtype", m.kvDtype, manifest_.kvDtype);
  same("target", m.targetName, manifest_.targetName);
  same("runtime.entry_points.step", m.stepEntry.empty(),
       manifest_.stepEntry.empty());
  same("runtime.entry_points.verify", m.verifyEntry.empty(),
       manifest_.verifyEntry.empty());
  same("runtime.kv_cache.kv_heads", m.kvHeads, manifest_.kvHeads);
  same("runtime.kv_cache.head_dim", m.kvHeadDim, manifest_.kvHeadDim);
  if (!differs.empty())
    return dataLoss(stageDir + "/manifest.json: " + differs +
                    " differs from stage 0's (" + dir_ +
                    "/manifest.json): every stage of an artifact is compiled "
                    "with one recipe (recompile the artifact)");
  if (m.tp != manifest_.tp || m.pp != manifest_.pp || m.stage != stage ||
      m.modelName != manifest_.modelName || m.vocabSize != manifest_.vocabSize)
    return dataLoss(stageDir + "/manifest.json: describes stage " +
                    std::to_string(m.stage) + " of tp " + std::to_string(m.tp) +
                    " x pp " + std::to_string(m.pp) + " of '" + m.modelName +
                    "', not stage " + std::to_string(stage) + " of this " +
                    "artifact's tp " + std::to_string(manifest_.tp) + " x pp " +
                    std::to_string(manifest_.pp) + " '" + manifest_.modelName +
                    "'");
  // From here on the stage's directory is the artifact this rank loads.
  int sub = ::openat(dirFd_, manifest_.stageDirs[stage - 1].c_str(),
                     O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sub < 0)
    return notFound(stageDir + ": cannot open: " + errnoText());
  closeFd(dirFd_);
  dirFd_ = sub;
  dir_ = stageDir;
  manifest_ = std::move(m);
  return Status::ok();
}

Status Artifact::load(const OpenOptions &options) {
  // Descriptors needed only while loading are closed on every path.
  struct Cleanup {
    Artifact &a;
    ~Cleanup() {
      closeFd(a.dirFd_);
      closeFd(a.weightsFd_);
      closeFd(a.modelFd_);
      std::string().swap(a.modelCode_);
    }
  } cleanup{*this};

  // Files are opened relative to the directory opened once here, so the
  // directory cannot be swapped for another while it is being checked.
  dirFd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd_ < 0) {
    if (errno == ENOTDIR)
      return notFound(dir_ + ": not a directory (an artifact is a directory "
                             "written by kiln-compile)");
    return notFound(dir_ + ": cannot open artifact directory: " + errnoText());
  }

  // manifest.json: a regular file, read whole up to a size limit. The same
  // bytes are checked against the signature and parsed.
  int manifestFd = -1;
  uint64_t manifestBytes = 0;
  KILN_RT_RETURN_IF_ERROR(openMember(
      "manifest.json", manifestFd, manifestBytes,
      "cannot open: No such file or directory (not an artifact directory?)"));
  std::string manifestText;
  Status s = manifestBytes > kMaxManifestBytes
                 ? dataLoss(dir_ + "/manifest.json: " +
                            std::to_string(manifestBytes) +
                            " bytes, larger than the " +
                            std::to_string(kMaxManifestBytes) +
                            "-byte limit for a manifest")
                 : readMember(manifestFd, "manifest.json", kMaxManifestBytes,
                              manifestText);
  closeFd(manifestFd);
  KILN_RT_RETURN_IF_ERROR(s);
  if (!options.trustedKeys.empty())
    KILN_RT_RETURN_IF_ERROR(verifySignature(manifestText, options.trustedKeys));
  KILN_RT_RETURN_IF_ERROR(parseManifest(manifestText, dir_, manifest_));
  // A partitioned plan runs as tp x pp ranks, each mapping its own shard.
  if (manifest_.stage != 0)
    return failedPrecondition(
        dir_ + " is pipeline stage " + std::to_string(manifest_.stage) +
        " of an artifact: open the artifact's directory, the one above");
  if (manifest_.tp > 1 || manifest_.pp > 1) {
    Communicator *comm = processGroup();
    const std::string tp = std::to_string(manifest_.tp * manifest_.pp);
    const std::string what =
        manifest_.pp == 1
            ? "tensor parallelism over " + tp + " ranks (manifest parallel.tp)"
            : "pipeline parallelism over " + tp + " ranks (manifest " +
                  "parallel: tp " + std::to_string(manifest_.tp) + " x pp " +
                  std::to_string(manifest_.pp) + ")";
    if (!comm && launchedAsRank())
      return failedPrecondition(
          dir_ + " is partitioned for " + what +
          ", and this tool does not run rank groups: kiln-run and kiln-serve "
          "do (`mpirun -np " + tp + " kiln-run " + dir_ +
          " ...`; docs/parallelism.md)");
    if (!comm)
      return failedPrecondition(
          dir_ + " is partitioned for " + what +
          ": launch one process per rank, e.g. `mpirun -np " + tp +
          " kiln-run " + dir_ + " ...` (or kiln-serve, kiln-bench, kiln-eval; "
          "docs/parallelism.md)");
    if (comm->size() != manifest_.tp * manifest_.pp)
      return failedPrecondition(
          dir_ + " is partitioned for " + tp + " ranks" +
          (manifest_.pp > 1 ? " (tp " + std::to_string(manifest_.tp) +
                                  " x pp " + std::to_string(manifest_.pp) +
                                  ")"
                            : std::string()) +
          " but this job has " +
          std::to_string(comm->size()) + ": launch it with mpirun -np " + tp);
    // Every rank must have opened the same artifact (a stale copy on one
    // node would run silently wrong): compare the manifests' hashes.
    const uint64_t mine = XXH3_64bits(manifestText.data(), manifestText.size());
    std::vector<uint64_t> all(size_t(comm->size()));
    KILN_RT_RETURN_IF_ERROR(comm->allGather(&mine, all.data(), sizeof(mine),
                                            "manifest check"));
    for (size_t r = 0; r < all.size(); ++r)
      if (all[r] != all[0])
        return failedPrecondition(
            dir_ + "/manifest.json differs between rank 0 and rank " +
            std::to_string(r) +
            ": every rank must open the same artifact (a different or stale "
            "copy at this path on that rank's node?)");
    KILN_RT_RETURN_IF_ERROR(comm->setPipeline(int32_t(manifest_.tp),
                                              int32_t(manifest_.pp)));
    group_ = comm;
    if (comm->stage() > 0)
      KILN_RT_RETURN_IF_ERROR(enterStage(comm->stage(), options));
    manifest_.weightsFile = manifest_.rankWeightsFiles[size_t(comm->tpRank())];
  } else if (Communicator *comm = processGroup(); comm && comm->size() > 1) {
    return failedPrecondition(
        dir_ + " is not partitioned (compiled without kiln-compile --tp or "
        "--pp) "
        "but this job has " + std::to_string(comm->size()) +
        " ranks: every rank would run the whole model; launch one process, "
        "or recompile with --tp " + std::to_string(comm->size()));
  }
  std::string tokenizerText;
  KILN_RT_RETURN_IF_ERROR(checkFiles(options, tokenizerText));

  // weights.bin: mapped read-only from the descriptor that was checked; page
  // alignment implies 64-byte alignment.
  const std::string weightsPath = dir_ + "/" + manifest_.weightsFile;
  struct stat st;
  if (::fstat(weightsFd_, &st) != 0)
    return dataLoss(weightsPath + ": cannot stat: " + errnoText());
  weightsBytes_ = uint64_t(st.st_size);
  if (weightsBytes_ > 0) {
    void *p = ::mmap(nullptr, weightsBytes_, PROT_READ, MAP_PRIVATE,
                     weightsFd_, 0);
    if (p == MAP_FAILED)
      return internalError(weightsPath + ": mmap failed: " + errnoText());
    mapping_ = p;
    mappingBytes_ = weightsBytes_;
    weights_ = static_cast<const uint8_t *>(p);
  }

  std::string tokPath = dir_ + "/" + manifest_.tokenizerFile;
  TokenizerStatus ts = Tokenizer::parse(tokenizerText, tokPath, tokenizer_);
  if (!ts.ok)
    return dataLoss(ts.message.rfind(tokPath, 0) == 0
                        ? ts.message
                        : tokPath + ": " + ts.message);
  if (tokenizer_.vocabSize() > manifest_.vocabSize)
    return dataLoss(tokPath + ": " + std::to_string(tokenizer_.vocabSize()) +
                    " pieces but manifest.json model.vocab_size is " +
                    std::to_string(manifest_.vocabSize));

  // Everything that can be checked without running model.so's code has been
  // checked; only now is it loaded (its constructors run).
  if (manifest_.target == Target::Cuda)
    return loadCuda();
  return loadModelLibrary();
}

Status Artifact::loadModelLibrary() {
  // model.so: its kiln_k_* references bind to this library's exports. What
  // is loaded is what was checked:
  //  - signed: a sealed in-memory copy of the verified bytes, so nothing
  //    written to the artifact after verification can be loaded;
  //  - unsigned: the path, after checking that it is still the regular file
  //    (same device and inode, not a link) that was opened and hashed. Who
  //    can swap it in between could as well have re-hashed the manifest:
  //    unsigned checksums protect against accidents only (docs/security.md).
  const std::string where = dir_ + "/model.so";
  std::string loadPath;
  int codeFd = -1;
  struct Closer {
    int &fd;
    ~Closer() { closeFd(fd); }
  } closer{codeFd};
  if (signatureVerified_) {
    codeFd = ::memfd_create("kiln-model.so", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (codeFd < 0)
      return internalError(where + ": memfd_create failed: " + errnoText());
    for (size_t done = 0; done < modelCode_.size();) {
      ssize_t put = ::write(codeFd, modelCode_.data() + done,
                            modelCode_.size() - done);
      if (put < 0 && errno == EINTR)
        continue;
      if (put <= 0)
        return internalError(where + ": cannot copy the verified code into "
                                     "memory: " + errnoText());
      done += size_t(put);
    }
    if (::fcntl(codeFd, F_ADD_SEALS,
                F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
      return internalError(where + ": cannot seal the verified code: " +
                           errnoText());
    loadPath = "/proc/self/fd/" + std::to_string(codeFd);
    if (::access(loadPath.c_str(), R_OK) != 0)
      return unimplemented(where + ": a signed model.so is loaded through " +
                           loadPath + ", which is not available (" +
                           errnoText() + "; is /proc mounted?)");
  } else {
    loadPath = where;
    if (loadPath[0] != '/' && loadPath.rfind("./", 0) != 0)
      loadPath = "./" + loadPath; // dlopen must not search the library path
    struct stat checked, now;
    if (::fstat(modelFd_, &checked) != 0 ||
        ::lstat(loadPath.c_str(), &now) != 0 || !S_ISREG(now.st_mode) ||
        now.st_dev != checked.st_dev || now.st_ino != checked.st_ino)
      return dataLoss(where + ": replaced while the artifact was being "
                              "opened (not the file that was checked)");
  }
  dlerror();
  library_ = dlopen(loadPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char *e = dlerror();
    return dataLoss(where + ": cannot load: " +
                    std::string(e ? e : "unknown dlopen error"));
  }
  KILN_RT_RETURN_IF_ERROR(checkPlanInfo());
  if (manifest_.target == Target::Cuda)
    return Status::ok(); // loadCuda resolves the CUDA ABI's symbols
  auto resolve = [&](const std::string &name, const char *field,
                     EntryPoint &fn) -> Status {
    void *sym = nullptr;
    KILN_RT_RETURN_IF_ERROR(resolveSymbol(name, field, sym));
    fn = reinterpret_cast<EntryPoint>(sym);
    return Status::ok();
  };
  KILN_RT_RETURN_IF_ERROR(
      resolve(manifest_.prefillEntry, "runtime.entry_points.prefill", prefill_));
  KILN_RT_RETURN_IF_ERROR(
      resolve(manifest_.decodeEntry, "runtime.entry_points.decode", decode_));
  if (!manifest_.stepEntry.empty())
    KILN_RT_RETURN_IF_ERROR(
        resolve(manifest_.stepEntry, "runtime.entry_points.step", step_));
  if (!manifest_.verifyEntry.empty())
    KILN_RT_RETURN_IF_ERROR(resolve(manifest_.verifyEntry,
                                    "runtime.entry_points.verify", verify_));
  return Status::ok();
}

Status Artifact::checkPlanInfo() {
  void *sym = nullptr;
  KILN_RT_RETURN_IF_ERROR(resolveSymbol("kiln_plan_info", nullptr, sym));
  kiln_plan_info_t info{};
  // A model.so built against an older plan_info.h leaves these untouched.
  info.prefill_weights_extent = -1;
  info.decode_weights_extent = -1;
  info.step_max_tokens = -1;
  info.step_weights_extent = -1;
  info.tp_size = -1;
  reinterpret_cast<kiln_plan_info_fn>(sym)(&info);
  auto mismatch = [&](const char *field, int64_t manifestValue,
                      int64_t planned) {
    return dataLoss(dir_ + "/manifest.json: " + field + " is " +
                    std::to_string(manifestValue) + " but model.so was planned for " +
                    std::to_string(planned) +
                    " (corrupted or mismatched artifact; recompile it)");
  };
  if (static_cast<int64_t>(manifest_.arenaBytes) != info.arena_bytes)
    return mismatch("runtime.arena_bytes",
                    static_cast<int64_t>(manifest_.arenaBytes), info.arena_bytes);
  if (manifest_.maxPrefillTokens != info.max_prefill_tokens)
    return mismatch("runtime.max_prefill_tokens", manifest_.maxPrefillTokens,
                    info.max_prefill_tokens);
  if (manifest_.vocabSize != info.vocab_size)
    return mismatch("model.vocab_size", manifest_.vocabSize, info.vocab_size);
  if (static_cast<int64_t>(manifest_.kvBytes) != info.kv_cache_bytes)
    return mismatch("runtime.kv_cache.bytes",
                    static_cast<int64_t>(manifest_.kvBytes), info.kv_cache_bytes);
  if (manifest_.kvMaxSeq != info.max_seq)
    return mismatch("runtime.kv_cache.max_seq", manifest_.kvMaxSeq, info.max_seq);
  // Every weight an entry point addresses lies inside weights.bin: a file
  // cut short (even with a re-hashed manifest) is an error, not a SIGBUS.
  if (info.prefill_weights_extent < 0 || info.decode_weights_extent < 0)
    return unimplemented(dir_ + "/model.so: kiln_plan_info reports no weight "
                                "extents (built against an older plan_info.h; "
                                "recompile the artifact)");
  // The step entry point: listed in the manifest exactly when planned.
  if (info.step_max_tokens < 0 || info.step_weights_extent < 0)
    return unimplemented(dir_ + "/model.so: kiln_plan_info reports no step "
                                "entry point fields (built against an older "
                                "plan_info.h; recompile the artifact)");
  // The collectives' buffers are sized for the plan's group.
  if (manifest_.tp != info.tp_size)
    return mismatch("parallel.tp", manifest_.tp, info.tp_size);
  if (manifest_.stepEntry.empty() != (info.step_max_tokens == 0))
    return dataLoss(dir_ + "/manifest.json: runtime.entry_points.step is " +
                    (manifest_.stepEntry.empty() ? "absent" : "present") +
                    " but model.so was planned " +
                    (info.step_max_tokens == 0 ? "without" : "with") +
                    " a step entry point (corrupted or mismatched artifact; "
                    "recompile it)");
  if (info.step_max_tokens > manifest_.maxPrefillTokens)
    return mismatch("runtime.max_prefill_tokens", manifest_.maxPrefillTokens,
                    info.step_max_tokens);
  stepMaxTokens_ = info.step_max_tokens;
  for (auto [entry, extent] :
       {std::pair<const char *, int64_t>{"prefill", info.prefill_weights_extent},
        {"decode", info.decode_weights_extent},
        {"step", info.step_weights_extent}})
    if (uint64_t(extent) > weightsBytes_)
      return dataLoss(dir_ + "/" + manifest_.weightsFile + ": " +
                      std::to_string(weightsBytes_) + " bytes, but model.so's " +
                      entry + " entry point reads weights up to byte " +
                      std::to_string(extent) +
                      " (weights file cut short or mismatched artifact; "
                      "recompile it)");
  return Status::ok();
}

Status Artifact::resolveSymbol(const std::string &name, const char *field,
                               void *&out) const {
  dlerror();
  void *sym = dlsym(library_, name.c_str());
  if (!sym) {
    const char *e = dlerror();
    return notFound(dir_ + "/model.so: " +
                    (field ? "entry point '" + name + "' (manifest.json " +
                                 field + ")"
                           : "symbol '" + name + "' (plan_info.h / cuda_abi.h)") +
                    " not found: " + std::string(e ? e : "null symbol"));
  }
  out = sym;
  return Status::ok();
}

Status Artifact::loadCuda() {
  // The device comes first: on a machine without one, that is the error.
  KILN_RT_RETURN_IF_ERROR(CudaBackend::open(dir_, cuda_));
  deviceName_ = cuda_->deviceName();
  KILN_RT_RETURN_IF_ERROR(loadModelLibrary());
  void *prefill = nullptr, *decode = nullptr, *step = nullptr,
       *sample = nullptr, *workspace = nullptr, *abi = nullptr;
  KILN_RT_RETURN_IF_ERROR(resolveSymbol(
      manifest_.prefillEntry, "runtime.entry_points.prefill", prefill));
  KILN_RT_RETURN_IF_ERROR(resolveSymbol(
      manifest_.decodeEntry, "runtime.entry_points.decode", decode));
  if (!manifest_.stepEntry.empty())
    KILN_RT_RETURN_IF_ERROR(resolveSymbol(
        manifest_.stepEntry, "runtime.entry_points.step", step));
  void *verify = nullptr;
  if (!manifest_.verifyEntry.empty())
    KILN_RT_RETURN_IF_ERROR(resolveSymbol(
        manifest_.verifyEntry, "runtime.entry_points.verify", verify));
  KILN_RT_RETURN_IF_ERROR(resolveSymbol("kiln_cuda_sample", nullptr, sample));
  KILN_RT_RETURN_IF_ERROR(
      resolveSymbol("kiln_cuda_workspace_bytes", nullptr, workspace));
  KILN_RT_RETURN_IF_ERROR(resolveSymbol("kiln_cuda_abi_version", nullptr, abi));
  auto abiFn = reinterpret_cast<kiln_cuda_abi_version_fn>(abi);
  int32_t version = abiFn();
  if (version != KILN_CUDA_ABI_VERSION)
    return unimplemented(dir_ + "/model.so: kiln_cuda_abi_version() is " +
                         std::to_string(version) + ", this runtime implements " +
                         std::to_string(KILN_CUDA_ABI_VERSION) +
                         " (recompile the artifact)");

  kiln_cudaexec_model_desc_t desc{};
  desc.weights = weights_;
  desc.weights_bytes = weightsBytes_;
  desc.arena_bytes = manifest_.arenaBytes;
  desc.kv_bytes = manifest_.kvBytes;
  desc.max_prefill_tokens = manifest_.maxPrefillTokens;
  desc.vocab_size = manifest_.vocabSize;
  desc.prefill = reinterpret_cast<kiln_cuda_entry_fn>(prefill);
  desc.decode = reinterpret_cast<kiln_cuda_entry_fn>(decode);
  desc.step = reinterpret_cast<kiln_cuda_entry_fn>(step);
  desc.verify = reinterpret_cast<kiln_cuda_entry_fn>(verify);
  desc.sample = reinterpret_cast<kiln_cuda_sample_fn>(sample);
  desc.workspace_bytes = reinterpret_cast<kiln_cuda_workspace_bytes_fn>(workspace);
  desc.abi_version = abiFn;
  // A tensor-parallel rank: one device per rank of the node, joined by an
  // NCCL communicator whose unique id rank 0 makes and broadcasts.
  // With pipeline stages the id makes one communicator over the job, from
  // which each stage's TP group is split.
  if (group_) {
    desc.tp_rank = group_->tpRank();
    desc.tp_size = group_->tpSize();
    desc.pp_size = group_->ppSize();
    desc.stage = group_->stage();
    const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    desc.local_rank = local ? std::atoi(local) : group_->rank();
    desc.timeout_ms = group_->timeoutMs();
    Status id = group_->rank() == 0 ? cuda_->ncclUniqueId(desc.nccl_id)
                                    : Status::ok();
    if (!id.isOk())
      group_->abort(dir_ + ": " + id.message(), 1);
    KILN_RT_RETURN_IF_ERROR(group_->broadcast(desc.nccl_id,
                                              sizeof(desc.nccl_id), 0,
                                              "NCCL unique id",
                                              /*bounded=*/true));
  }
  if (mapping_)
    madvise(mapping_, mappingBytes_, MADV_SEQUENTIAL);
  Status st = cuda_->createModel(desc);
  if (!st.isOk())
    return Status(st.code(), dir_ + ": loading the model onto " + deviceName_ +
                                 " failed: " + st.message());
  // The device holds the weights now; drop the host copy from memory (the
  // mapping stays valid and would fault the pages back in).
  if (mapping_)
    madvise(mapping_, mappingBytes_, MADV_DONTNEED);
  return Status::ok();
}

} // namespace kiln::rt
