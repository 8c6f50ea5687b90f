//===- Artifact.cpp - Loading and validating a Kiln artifact ------*- C++ -*-===//
//
// Validation order: manifest.json parses; format/version/abi_version/target;
// required fields and their ranges; KV-cache byte count; weight table
// (64-byte alignment, bounds); every listed file exists with the listed size
// and XXH3-64; then weights.bin is mmap'd, tokenizer.json loaded and model.so
// dlopen()ed. Each error names ARTIFACT/<file> and the field or offset.
//
//===----------------------------------------------------------------------===//
#include "artifact/Artifact.h"

#include "cuda/CudaBackend.h"
#include "session/Executor.h"

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
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
  if (expected != out.kvBytes)
    return r.error("runtime.kv_cache.bytes is " + std::to_string(out.kvBytes) +
                   " but layers * 2 * max_seq * kv_heads * head_dim * " +
                   std::to_string(kvElem) +
                   (kvInt8 ? " (+ 4-byte scales per kv head)" : "") + " = " +
                   std::to_string(uint64_t(expected)));

  // files
  KILN_RT_RETURN_IF_ERROR(r.node("files", n));
  if (!n->is_object())
    return r.error("field 'files' must be an object");
  for (auto it = n->begin(); it != n->end(); ++it) {
    ArtifactFile f;
    f.name = it.key();
    if (!isPlainFileName(f.name))
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
  return Status::ok();
}

static std::string errnoText() { return std::strerror(errno); }

Status hashFile(const std::string &path, std::string &outHex) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return notFound(path + ": cannot open: " + errnoText());
  XXH3_state_t *state = XXH3_createState();
  XXH3_64bits_reset(state);
  std::vector<char> buf(size_t(8) << 20);
  Status st;
  for (;;) {
    ssize_t got = ::read(fd, buf.data(), buf.size());
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      st = dataLoss(path + ": read error: " + errnoText());
      break;
    }
    if (got == 0)
      break;
    XXH3_64bits_update(state, buf.data(), size_t(got));
  }
  ::close(fd);
  uint64_t h = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  if (!st.isOk())
    return st;
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)h);
  outHex = hex;
  return Status::ok();
}

Artifact::~Artifact() {
  cuda_.reset(); // device memory and cuBLASLt before model.so goes away
  if (library_)
    dlclose(library_);
  if (mapping_)
    munmap(mapping_, mappingBytes_);
}

Status Artifact::createExecutor(std::unique_ptr<Executor> &out) const {
  if (cuda_)
    return cuda_->createExecutor(out);
  return createCpuExecutor(*this, out);
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

Status Artifact::open(const std::string &dir, bool verifyChecksums,
                      std::unique_ptr<Artifact> &out) {
  std::unique_ptr<Artifact> a(new Artifact());
  a->dir_ = dir;
  while (a->dir_.size() > 1 && a->dir_.back() == '/')
    a->dir_.pop_back();
  KILN_RT_RETURN_IF_ERROR(a->load(verifyChecksums));
  out = std::move(a);
  return Status::ok();
}

Status Artifact::load(bool verifyChecksums) {
  struct stat st;
  if (::stat(dir_.c_str(), &st) != 0)
    return notFound(dir_ + ": cannot open artifact directory: " + errnoText());
  if (!S_ISDIR(st.st_mode))
    return notFound(dir_ + ": not a directory (an artifact is a directory "
                           "written by kiln-compile)");
  const std::string manifestPath = dir_ + "/manifest.json";
  std::ifstream in(manifestPath, std::ios::binary);
  if (!in)
    return notFound(manifestPath + ": cannot open: " + errnoText() +
                    " (not an artifact directory?)");
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  KILN_RT_RETURN_IF_ERROR(parseManifest(text, dir_, manifest_));

  // Every listed file: present, regular, listed size, listed checksum.
  for (const ArtifactFile &f : manifest_.files) {
    std::string path = dir_ + "/" + f.name;
    if (::stat(path.c_str(), &st) != 0)
      return notFound(path + ": missing (" + errnoText() +
                      "); manifest.json lists it under 'files'");
    if (!S_ISREG(st.st_mode))
      return dataLoss(path + ": not a regular file");
    if (uint64_t(st.st_size) != f.bytes)
      return dataLoss(path + ": size " + std::to_string(st.st_size) +
                      " bytes, manifest says " + std::to_string(f.bytes) +
                      " (truncated or corrupted artifact)");
    if (!verifyChecksums)
      continue;
    std::string hex;
    KILN_RT_RETURN_IF_ERROR(hashFile(path, hex));
    if (hex != f.xxh3)
      return dataLoss(path + ": XXH3-64 is " + hex + ", manifest says " +
                      f.xxh3 + " (corrupted artifact)");
  }

  // weights.bin: mapped read-only; page alignment implies 64-byte alignment.
  std::string weightsPath = dir_ + "/" + manifest_.weightsFile;
  int fd = ::open(weightsPath.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return notFound(weightsPath + ": cannot open: " + errnoText());
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return dataLoss(weightsPath + ": cannot stat: " + errnoText());
  }
  weightsBytes_ = uint64_t(st.st_size);
  if (weightsBytes_ > 0) {
    void *p = ::mmap(nullptr, weightsBytes_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      Status s = internalError(weightsPath + ": mmap failed: " + errnoText());
      ::close(fd);
      return s;
    }
    mapping_ = p;
    mappingBytes_ = weightsBytes_;
    weights_ = static_cast<const uint8_t *>(p);
  }
  ::close(fd);

  std::string tokPath = dir_ + "/" + manifest_.tokenizerFile;
  TokenizerStatus ts = Tokenizer::load(tokPath, tokenizer_);
  if (!ts.ok)
    return dataLoss(ts.message.rfind(tokPath, 0) == 0
                        ? ts.message
                        : tokPath + ": " + ts.message);
  if (tokenizer_.vocabSize() > manifest_.vocabSize)
    return dataLoss(tokPath + ": " + std::to_string(tokenizer_.vocabSize()) +
                    " pieces but manifest.json model.vocab_size is " +
                    std::to_string(manifest_.vocabSize));

  if (manifest_.target == Target::Cuda)
    return loadCuda();
  return loadModelLibrary();
}

Status Artifact::loadModelLibrary() {
  // model.so: its kiln_k_* references bind to this library's exports.
  std::string soPath = dir_ + "/model.so";
  if (soPath[0] != '/' && soPath.rfind("./", 0) != 0)
    soPath = "./" + soPath; // dlopen must not search the library path
  dlerror();
  library_ = dlopen(soPath.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char *e = dlerror();
    return dataLoss(dir_ + "/model.so: cannot load: " +
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
  return Status::ok();
}

Status Artifact::checkPlanInfo() const {
  void *sym = nullptr;
  KILN_RT_RETURN_IF_ERROR(resolveSymbol("kiln_plan_info", nullptr, sym));
  kiln_plan_info_t info{};
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
  void *prefill = nullptr, *decode = nullptr, *sample = nullptr,
       *workspace = nullptr, *abi = nullptr;
  KILN_RT_RETURN_IF_ERROR(resolveSymbol(
      manifest_.prefillEntry, "runtime.entry_points.prefill", prefill));
  KILN_RT_RETURN_IF_ERROR(resolveSymbol(
      manifest_.decodeEntry, "runtime.entry_points.decode", decode));
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
  desc.sample = reinterpret_cast<kiln_cuda_sample_fn>(sample);
  desc.workspace_bytes = reinterpret_cast<kiln_cuda_workspace_bytes_fn>(workspace);
  desc.abi_version = abiFn;
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
