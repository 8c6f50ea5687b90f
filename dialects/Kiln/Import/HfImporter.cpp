//===- HfImporter.cpp - Hugging Face (safetensors) importer ---------------===//
//
// A Hugging Face Llama directory: config.json (LlamaForCausalLM) and one or
// more *.safetensors files (listed by model.safetensors.index.json when
// sharded). safetensors: uint64 LE header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {..}},
// then the data; offsets are relative to byte 8 + N. As the safetensors
// loader requires, each span [begin, end) holds exactly numel x dtype size
// bytes and the spans, sorted, tile the data section without holes or
// overlaps.
//
// HF stores q_proj/k_proj rows per head in "rotate-half" order; the
// importer attaches a RopeHalfToAdjacent transform so the materialized
// weights use the adjacent-pair order of kiln.rope (and llama2.c / GGUF).
//
// A config.json with a GPTQ or AWQ `quantization_config` makes every linear
// stored as <prefix>.qweight/.qzeros/.scales a kept-quantized weight
// (Prequantized.h); linears stored as <prefix>.weight stay float.
//
//===----------------------------------------------------------------------===//

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/Prequantized.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <tuple>

using namespace llvm;
using namespace mlir::kiln::detail;

namespace mlir::kiln {

namespace {
struct SafeTensor {
  std::string file;
  std::string dtype;
  SmallVector<int64_t, 2> shape;
  uint64_t offset = 0; ///< absolute file offset
  uint64_t bytes = 0;
};

struct SafetensorsIndex {
  StringMap<SafeTensor> tensors;
  /// "__metadata__" entries naming another tensor (tied-weight aliases).
  StringMap<std::string> aliases;
};
} // namespace

/// Bits per element of a safetensors dtype (safetensors' Dtype enum).
static std::optional<uint64_t> dtypeBits(StringRef dtype) {
  return StringSwitch<std::optional<uint64_t>>(dtype)
      .Cases({"F64", "I64", "U64", "C64"}, 64)
      .Cases({"F32", "I32", "U32"}, 32)
      .Cases({"F16", "BF16", "I16", "U16"}, 16)
      .Cases({"I8", "U8", "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0"}, 8)
      .Cases({"F6_E2M3", "F6_E3M2"}, 6)
      .Case("F4", 4)
      .Default(std::nullopt);
}

static std::string formatJson(const json::Value &v) {
  std::string s;
  raw_string_ostream(s) << v;
  return s;
}

static Error parseSafetensors(StringRef file, SafetensorsIndex &index) {
  Expected<uint64_t> size = getFileSize(file, "a safetensors file");
  if (!size)
    return size.takeError();
  if (*size < 8)
    return fileError(file, "file is " + Twine(*size) +
                               " bytes, too small for the 8-byte safetensors "
                               "header length");
  char lenBytes[8];
  if (Error e = readFileRange(file, 0, lenBytes, "header length"))
    return e;
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= uint64_t(static_cast<uint8_t>(lenBytes[i])) << (8 * i);
  if (n > *size - 8)
    return fileError(file, "header length " + Twine(n) +
                               " at offset 0 exceeds the file (" +
                               Twine(*size) + " bytes)");
  if (n > kMaxSafetensorsHeaderBytes)
    return fileError(file, "header length " + Twine(n) +
                               " at offset 0 is more than the limit of " +
                               Twine(kMaxSafetensorsHeaderBytes) + " bytes");
  std::string header(n, '\0');
  if (Error e = readFileRange(file, 8, header, "JSON header"))
    return e;
  if (Error e = checkJsonDepth(header, file, /*baseOffset=*/8))
    return e;
  Expected<json::Value> root = json::parse(header);
  if (!root)
    return fileError(file, "invalid JSON header at offset 8: " +
                               toString(root.takeError()));
  const json::Object *top = root->getAsObject();
  if (!top)
    return fileError(file, "JSON header at offset 8 is not an object");
  uint64_t dataStart = 8 + n;
  struct Span {
    std::string name;
    uint64_t begin, end;
  };
  std::vector<Span> spans;
  for (const auto &kv : *top) {
    StringRef name = kv.first;
    if (name == "__metadata__") {
      if (const json::Object *meta = kv.second.getAsObject())
        for (const auto &m : *meta)
          if (std::optional<StringRef> target = m.second.getAsString())
            if (StringRef(m.first) != "format")
              index.aliases[StringRef(m.first)] = target->str();
      continue;
    }
    const json::Object *t = kv.second.getAsObject();
    if (!t)
      return fileError(file, "header entry '" + name + "' is not an object");
    SafeTensor st;
    st.file = file.str();
    std::optional<StringRef> dtype = t->getString("dtype");
    const json::Array *shape = t->getArray("shape");
    const json::Array *offsets = t->getArray("data_offsets");
    if (!dtype || !shape || !offsets || offsets->size() != 2)
      return fileError(file, "header entry '" + name +
                                 "' needs 'dtype' (string), 'shape' (array) "
                                 "and 'data_offsets' ([begin, end])");
    st.dtype = dtype->str();
    for (const json::Value &d : *shape) {
      std::optional<int64_t> v = d.getAsInteger();
      if (!v || *v < 0)
        return fileError(file, "header entry '" + name + "': shape " +
                                   formatJson(json::Value(json::Array(*shape))) +
                                   " must hold non-negative integers, got " +
                                   formatJson(d));
      st.shape.push_back(*v);
    }
    std::optional<int64_t> begin = (*offsets)[0].getAsInteger();
    std::optional<int64_t> end = (*offsets)[1].getAsInteger();
    if (!begin || !end || *begin < 0 || *end < *begin)
      return fileError(file, "tensor '" + name + "': data_offsets " +
                                 formatJson((*offsets)[0]) + ", " +
                                 formatJson((*offsets)[1]) +
                                 " must be integers [begin, end) with "
                                 "0 <= begin <= end");
    st.offset = dataStart + static_cast<uint64_t>(*begin);
    st.bytes = static_cast<uint64_t>(*end - *begin);
    if (static_cast<uint64_t>(*end) > *size - dataStart)
      return fileError(file, "tensor '" + name + "': data_offsets [" +
                                 Twine(*begin) + ", " + Twine(*end) +
                                 ") (file offsets " + Twine(st.offset) +
                                 " to " + Twine(dataStart + *end) +
                                 ") extend past the end of the file (" +
                                 Twine(*size) + " bytes)");
    std::optional<uint64_t> bits = dtypeBits(st.dtype);
    if (!bits)
      return fileError(file, "tensor '" + name + "' has unknown dtype '" +
                                 st.dtype + "'");
    std::optional<uint64_t> numel = numElements(st.shape);
    uint64_t totalBits;
    if (!numel || mulOverflow(*numel, *bits, totalBits) || totalBits % 8 != 0)
      return fileError(file, "tensor '" + name + "': " + st.dtype + " " +
                                 formatShape(st.shape) +
                                 " is not a whole number of bytes that fits "
                                 "in 64 bits");
    if (totalBits / 8 != st.bytes)
      return fileError(
          file, "tensor '" + name + "': " + st.dtype + " " +
                    formatShape(st.shape) + " needs " + Twine(totalBits / 8) +
                    " bytes but data_offsets [" + Twine(*begin) + ", " +
                    Twine(*end) + ") span " + Twine(st.bytes));
    if (index.tensors.count(name))
      return fileError(file, "tensor '" + name +
                                 "' is also defined in " +
                                 index.tensors[name].file);
    spans.push_back({name.str(), static_cast<uint64_t>(*begin),
                     static_cast<uint64_t>(*end)});
    index.tensors[name] = std::move(st);
  }

  // The tensors must index the whole data section, without holes or
  // overlaps (as safetensors' own loader requires).
  llvm::sort(spans, [](const Span &a, const Span &b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t dataSize = *size - dataStart;
  auto describe = [](const Span &s) {
    return "'" + s.name + "' data_offsets [" + std::to_string(s.begin) + ", " +
           std::to_string(s.end) + ")";
  };
  uint64_t cursor = 0;
  const Span *prev = nullptr;
  for (const Span &s : spans) {
    if (s.begin < cursor)
      return fileError(file, "tensors " + describe(*prev) + " and " +
                                 describe(s) + " overlap");
    if (s.begin > cursor)
      return fileError(
          file, "bytes [" + Twine(cursor) + ", " + Twine(s.begin) +
                    ") of the data section belong to no tensor (" +
                    (prev ? "between tensors " + describe(*prev) + " and " +
                                describe(s)
                          : "before the first tensor " + describe(s)) +
                    "); safetensors requires the tensors to cover the data "
                    "section without holes");
    cursor = s.end;
    prev = &s;
  }
  if (cursor != dataSize)
    return fileError(
        file, "the data section (file offsets " + Twine(dataStart) + " to " +
                  Twine(*size) + ") holds " + Twine(dataSize) +
                  " bytes but the tensors end at data offset " + Twine(cursor) +
                  (prev ? " (last tensor " + describe(*prev) + ")"
                        : std::string(" (no tensors)")) +
                  "; safetensors requires the tensors to cover "
                  "the data section exactly");
  return Error::success();
}

/// True if `path` is `root` or below it (both real paths).
static bool isWithin(StringRef path, StringRef root) {
  if (root.empty() || !path.starts_with(root))
    return false;
  return path.size() == root.size() ||
         sys::path::is_separator(path[root.size()]) ||
         sys::path::is_separator(root.back());
}

/// The path of the shard `file` named by weight_map['tensor'] of the index
/// `indexPath` in the model directory `dir`. The entry must stay inside the
/// directory: no absolute path, no '..', and its real path (symlinks
/// resolved) below the real path of `dir`, or, for a Hugging Face hub cache
/// snapshot (<repo>/snapshots/<rev>), below <repo>/blobs, where the hub
/// keeps the files the snapshot links to.
static Expected<std::string> resolveShard(StringRef dir, StringRef indexPath,
                                          StringRef tensor, StringRef file) {
  auto refuse = [&](const Twine &why) {
    return fileError(indexPath, "weight_map['" + tensor + "'] names '" + file +
                                    "', " + why +
                                    "; entries must name files inside the "
                                    "model directory");
  };
  if (file.empty())
    return refuse("an empty path");
  if (sys::path::is_absolute(file) || sys::path::is_separator(file.front()))
    return refuse("an absolute path");
  for (StringRef part : llvm::make_range(sys::path::begin(file),
                                         sys::path::end(file)))
    if (part == "..")
      return refuse("a path with '..'");
  std::string path = joinPath(dir, file);
  SmallString<256> realDir, realFile;
  if (sys::fs::real_path(dir, realDir))
    return fileError(dir, "cannot resolve the model directory");
  // A missing shard is reported when it is read.
  if (sys::fs::real_path(path, realFile))
    return path;
  if (isWithin(realFile, realDir))
    return path;
  StringRef snapshots = sys::path::parent_path(realDir);
  if (sys::path::filename(snapshots) == "snapshots") {
    SmallString<256> blobs(sys::path::parent_path(snapshots));
    sys::path::append(blobs, "blobs");
    if (isWithin(realFile, blobs))
      return path;
  }
  return refuse("which resolves to " + realFile +
                ", outside the model directory " + realDir);
}

/// True if `a` and `b` hold the same dtype, shape and bytes (compared in
/// chunks, so a large embedding is never held twice).
static Expected<bool> sameTensorData(const SafeTensor &a, const SafeTensor &b) {
  if (a.dtype != b.dtype || a.shape != b.shape || a.bytes != b.bytes)
    return false;
  constexpr uint64_t kChunk = uint64_t(1) << 20;
  std::string x, y;
  for (uint64_t done = 0; done < a.bytes; done += kChunk) {
    uint64_t n = std::min(kChunk, a.bytes - done);
    x.resize(n);
    y.resize(n);
    if (Error e = readFileRange(a.file, a.offset + done, x, "tensor data"))
      return std::move(e);
    if (Error e = readFileRange(b.file, b.offset + done, y, "tensor data"))
      return std::move(e);
    if (x != y)
      return false;
  }
  return true;
}

/// Lists the safetensors files of `dir`.
static Expected<std::vector<std::string>> listShards(StringRef dir) {
  std::vector<std::string> files;
  std::string indexPath = joinPath(dir, "model.safetensors.index.json");
  if (sys::fs::exists(indexPath)) {
    Expected<json::Value> root =
        readJsonFile(indexPath, kMaxJsonConfigBytes, "a JSON file");
    if (!root)
      return root.takeError();
    const json::Object *top = root->getAsObject();
    const json::Object *map = top ? top->getObject("weight_map") : nullptr;
    if (!map)
      return fileError(indexPath, "missing object field 'weight_map'");
    StringMap<bool> seen;
    for (const auto &kv : *map) {
      std::optional<StringRef> f = kv.second.getAsString();
      if (!f)
        return fileError(indexPath, "weight_map['" + StringRef(kv.first) +
                                        "'] is not a file name");
      if (!seen.insert({*f, true}).second)
        continue;
      Expected<std::string> shard = resolveShard(dir, indexPath, kv.first, *f);
      if (!shard)
        return shard.takeError();
      files.push_back(std::move(*shard));
    }
    llvm::sort(files);
    return files;
  }
  std::error_code ec;
  for (sys::fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    if (StringRef(it->path()).ends_with(".safetensors"))
      files.push_back(it->path());
  if (ec)
    return fileError(dir, "cannot list directory: " + ec.message());
  llvm::sort(files);
  if (files.empty())
    return fileError(dir, "no *.safetensors file (expected a Hugging Face "
                          "model directory)");
  return files;
}

/// Canonical name -> HF tensor name.
static std::string hfName(StringRef canonical) {
  if (canonical == "tok_embeddings")
    return "model.embed_tokens.weight";
  if (canonical == "norm")
    return "model.norm.weight";
  if (canonical == "output")
    return "lm_head.weight";
  auto [layersPrefix, rest] = canonical.split('.');
  auto [index, what] = rest.split('.');
  (void)layersPrefix;
  static const std::pair<StringRef, StringRef> map[] = {
      {"attention_norm", "input_layernorm"},
      {"wq", "self_attn.q_proj"},
      {"wk", "self_attn.k_proj"},
      {"wv", "self_attn.v_proj"},
      {"wo", "self_attn.o_proj"},
      {"ffn_norm", "post_attention_layernorm"},
      {"w1", "mlp.gate_proj"},
      {"w2", "mlp.down_proj"},
      {"w3", "mlp.up_proj"}};
  for (const auto &[from, to] : map)
    if (what == from)
      return ("model.layers." + index + "." + to + ".weight").str();
  static const std::pair<StringRef, StringRef> biases[] = {
      {"bq", "self_attn.q_proj"},
      {"bk", "self_attn.k_proj"},
      {"bv", "self_attn.v_proj"}};
  for (const auto &[from, to] : biases)
    if (what == from)
      return ("model.layers." + index + "." + to + ".bias").str();
  return canonical.str();
}

/// Reads a number `key` of the RoPE settings object `obj` (called `where` in
/// messages) into `dst`; a missing one is an error unless `dflt` is given.
static Error ropeNumber(const json::Object &obj, StringRef where,
                        StringRef cfgPath, StringRef key,
                        std::optional<double> dflt, double &dst) {
  const json::Value *v = obj.get(key);
  if (!v || v->kind() == json::Value::Null) {
    if (!dflt)
      return fileError(cfgPath, "field '" + where + "." + key +
                                    "' is missing (needed by its rope_type)");
    dst = *dflt;
    return Error::success();
  }
  std::optional<double> d = v->getAsNumber();
  if (!d || !std::isfinite(*d))
    return fileError(cfgPath, "field '" + where + "." + key + "' is " +
                                  formatJson(*v) + ", expected a number");
  dst = *d;
  return Error::success();
}

static Error readRopeConfig(const json::Object &cfg, StringRef cfgPath,
                     LlamaConfig &c) {
  // transformers 5.x: everything in `rope_parameters` (rope_theta included);
  // 4.x: top-level `rope_theta` and an optional `rope_scaling` object whose
  // kind is `rope_type` (older files: `type`).
  const json::Value *params = cfg.get("rope_parameters");
  const json::Value *scaling = cfg.get("rope_scaling");
  bool v5 = params && params->kind() != json::Value::Null;
  StringRef where = v5 ? "rope_parameters" : "rope_scaling";
  const json::Value *obj = v5 ? params : scaling;
  double theta = 10000.0;
  if (const json::Value *t = cfg.get("rope_theta");
      t && t->kind() != json::Value::Null) {
    std::optional<double> d = t->getAsNumber();
    if (!d)
      return fileError(cfgPath, "field 'rope_theta' is " + formatJson(*t) +
                                    ", expected a number");
    theta = *d;
  }
  if (!obj || obj->kind() == json::Value::Null) {
    c.ropeTheta = static_cast<float>(theta);
    return Error::success();
  }
  const json::Object *o = obj->getAsObject();
  if (!o)
    return fileError(cfgPath, "field '" + where + "' is " + formatJson(*obj) +
                                  ", expected an object");
  if (v5) {
    // Per-layer-type RoPE settings (Gemma-style) nest objects here.
    if (o->getObject("full_attention") || o->getObject("sliding_attention"))
      return fileError(cfgPath, "field 'rope_parameters' holds per-layer-type "
                                "RoPE settings, which are not supported");
    if (Error e = ropeNumber(*o, where, cfgPath, "rope_theta", theta, theta))
      return e;
  }
  c.ropeTheta = static_cast<float>(theta);
  std::optional<StringRef> type = o->getString("rope_type");
  if (!type)
    type = o->getString("type");
  if (!type)
    return fileError(cfgPath, "field '" + where +
                                  "' has no string 'rope_type' (or 'type')");
  RopeScaling &rs = c.ropeScaling;
  if (*type == "default")
    return Error::success();
  double factor = 0, low = 0, high = 0, original = 0;
  if (*type == "linear" || *type == "dynamic" || *type == "llama3")
    if (Error e = ropeNumber(*o, where, cfgPath, "factor", std::nullopt, factor))
      return e;
  if (*type == "linear") {
    rs.kind = RopeScaling::Kind::Linear;
  } else if (*type == "dynamic") {
    rs.kind = RopeScaling::Kind::Dynamic;
    // transformers grows theta past config.max_position_embeddings.
    rs.originalMaxPositions = c.maxSeqLen;
  } else if (*type == "llama3") {
    rs.kind = RopeScaling::Kind::Llama3;
    for (auto [key, dst] :
         {std::pair<StringRef, double *>("low_freq_factor", &low),
          std::pair<StringRef, double *>("high_freq_factor", &high),
          std::pair<StringRef, double *>("original_max_position_embeddings",
                                         &original)})
      if (Error e = ropeNumber(*o, where, cfgPath, key, std::nullopt, *dst))
        return e;
    if (!(low > 0) || !(high > low))
      return fileError(cfgPath, "fields '" + where + ".low_freq_factor' (" +
                                    formatJson(json::Value(low)) + ") and 'high_freq_factor' (" +
                                    formatJson(json::Value(high)) +
                                    ") must satisfy 0 < low < high");
    if (!(original >= 1) || original != std::floor(original) ||
        original > double(int64_t(1) << 40))
      return fileError(cfgPath, "field '" + where +
                                    ".original_max_position_embeddings' is " +
                                    formatJson(json::Value(original)) +
                                    ", expected a positive integer");
    rs.lowFreqFactor = static_cast<float>(low);
    rs.highFreqFactor = static_cast<float>(high);
    rs.originalMaxPositions = static_cast<int64_t>(original);
  } else {
    return fileError(cfgPath, "field '" + where + ".rope_type' is '" + *type +
                                  "', which is not supported (expected "
                                  "'default', 'linear', 'dynamic' or 'llama3')");
  }
  if (!(factor > 0) || !std::isfinite(factor))
    return fileError(cfgPath, "field '" + where + ".factor' is " +
                                  formatJson(json::Value(factor)) + ", expected a positive number");
  if (rs.kind == RopeScaling::Kind::Dynamic && factor < 1)
    return fileError(cfgPath, "field '" + where + ".factor' is " +
                                  formatJson(json::Value(factor)) +
                                  ", dynamic scaling needs a factor >= 1");
  rs.factor = static_cast<float>(factor);
  // Dynamic NTK exists to run past the trained context: plan for factor x.
  if (rs.kind == RopeScaling::Kind::Dynamic)
    c.maxSeqLen = static_cast<int64_t>(double(c.maxSeqLen) * factor);
  return Error::success();
}

static Error readSlidingWindow(const json::Object &cfg, StringRef cfgPath,
                        StringRef arch, LlamaConfig &c) {
  const json::Value *v = cfg.get("sliding_window");
  if (arch == "qwen2") {
    // Qwen2 applies its window only with use_sliding_window (and then per
    // layer from max_window_layers): not supported.
    const json::Value *use = cfg.get("use_sliding_window");
    if (use && use->getAsBoolean() == std::optional<bool>(true))
      return fileError(cfgPath, "field 'use_sliding_window' is true; Qwen2's "
                                "per-layer sliding window is not supported");
    return Error::success();
  }
  if (!v || v->kind() == json::Value::Null)
    return Error::success();
  if (arch != "mistral")
    return fileError(cfgPath, "field 'sliding_window' is set for a '" + arch +
                                  "' model; only Mistral's is supported");
  std::optional<int64_t> w = v->getAsInteger();
  if (!w || *w <= 0)
    return fileError(cfgPath, "field 'sliding_window' is " + formatJson(*v) +
                                  ", expected a positive integer (or null for "
                                  "none)");
  // A window covering the whole context is plain causal attention.
  c.slidingWindow = *w < c.maxSeqLen ? *w : 0;
  return Error::success();
}

static Expected<TensorSource> makeSource(const SafeTensor &st, StringRef name,
                                         ArrayRef<int64_t> expected) {
  TensorSource s;
  s.file = st.file;
  s.tensor = name.str();
  if (st.dtype == "F32")
    s.storage = StorageType::F32;
  else if (st.dtype == "F16")
    s.storage = StorageType::F16;
  else if (st.dtype == "BF16")
    s.storage = StorageType::BF16;
  else
    return fileError(st.file, "tensor '" + name + "' has unsupported dtype '" +
                                  st.dtype + "' (expected F32, F16 or BF16)");
  s.shape = st.shape;
  if (Error e = checkShape(st.file, name, s.shape, expected))
    return std::move(e);
  s.offset = st.offset;
  s.bytes = st.bytes;
  return s;
}

/// The chat template of a Hugging Face checkpoint: tokenizer_config.json
/// "chat_template" (a string, or a list of {"name", "template"} of which
/// "default" is used), else chat_template.jinja beside it; and the
/// end-of-turn ids: generation_config.json "eos_token_id" (an id or a list),
/// then the tokenizer's EOS.
static Error chatFromHf(StringRef dir, ModelDesc &model) {
  int64_t vocab = int64_t(model.tokenizer.pieces.size());
  std::string cfgPath = joinPath(dir, "tokenizer_config.json");
  bool found = false;
  if (sys::fs::exists(cfgPath)) {
    Expected<json::Value> root =
        readJsonFile(cfgPath, kMaxJsonConfigBytes, "a JSON file");
    if (!root)
      return root.takeError();
    const json::Object *obj = root->getAsObject();
    if (!obj)
      return fileError(cfgPath, "expected a JSON object");
    if (const json::Value *t = obj->get("chat_template")) {
      if (std::optional<StringRef> text = t->getAsString()) {
        if (Error e = setChatTemplate(model, text->str(),
                                      cfgPath + " (chat_template)"))
          return e;
        found = true;
      } else if (const json::Array *list = t->getAsArray()) {
        for (size_t i = 0; i < list->size() && !found; ++i) {
          const json::Object *entry = (*list)[i].getAsObject();
          std::optional<StringRef> name =
              entry ? entry->getString("name") : std::nullopt;
          std::optional<StringRef> text =
              entry ? entry->getString("template") : std::nullopt;
          if (!name || !text)
            return fileError(cfgPath, "chat_template[" + Twine(i) +
                                          "] must be an object with string "
                                          "fields 'name' and 'template'");
          if (*name != "default")
            continue;
          if (Error e = setChatTemplate(model, text->str(),
                                        cfgPath + " (chat_template \"default\")"))
            return e;
          found = true;
        }
        if (!found)
          return fileError(cfgPath, "chat_template is a list of named "
                                    "templates without one named \"default\"");
      } else if (!t->getAsNull()) {
        return fileError(cfgPath, "chat_template must be a string or a list "
                                  "of {\"name\", \"template\"} objects");
      }
    }
  }
  std::string jinjaPath = joinPath(dir, "chat_template.jinja");
  if (!found && sys::fs::exists(jinjaPath)) {
    Expected<uint64_t> size = getFileSize(jinjaPath, "a chat template file");
    if (!size)
      return size.takeError();
    if (*size > kMaxChatTemplateBytes)
      return fileError(jinjaPath, "chat template is " + Twine(*size) +
                                      " bytes, more than the " +
                                      Twine(kMaxChatTemplateBytes) +
                                      " Kiln accepts");
    std::string text(size_t(*size), '\0');
    if (Error e = readFileRange(jinjaPath, 0, text, "a chat template file"))
      return e;
    if (Error e = setChatTemplate(model, std::move(text), jinjaPath))
      return e;
  }
  std::string genPath = joinPath(dir, "generation_config.json");
  if (sys::fs::exists(genPath)) {
    Expected<json::Value> root =
        readJsonFile(genPath, kMaxJsonConfigBytes, "a JSON file");
    if (!root)
      return root.takeError();
    const json::Object *obj = root->getAsObject();
    const json::Value *eos = obj ? obj->get("eos_token_id") : nullptr;
    std::vector<const json::Value *> ids;
    if (eos && eos->getAsArray())
      for (const json::Value &v : *eos->getAsArray())
        ids.push_back(&v);
    else if (eos && !eos->getAsNull())
      ids.push_back(eos);
    for (const json::Value *v : ids) {
      std::optional<int64_t> id = v->getAsInteger();
      if (!id)
        return fileError(genPath, "eos_token_id must be a token id or a list "
                                  "of token ids");
      if (Error e = addEndOfTurnId(model, *id, vocab, genPath, "eos_token_id"))
        return e;
    }
  }
  return addEndOfTurnId(model, model.tokenizer.eosId, vocab, dir,
                        "the tokenizer's EOS id");
}

Expected<ModelDesc> importHuggingFace(StringRef dir, StringRef tokenizer) {
  std::string cfgPath = joinPath(dir, "config.json");
  if (!sys::fs::exists(cfgPath)) {
    // A compiled artifact given where its source model belongs.
    if (sys::fs::exists(joinPath(dir, "manifest.json")))
      return fileError(dir, "is a Kiln artifact (manifest.json), not a "
                            "model checkpoint: give the model it was "
                            "compiled from (a llama2.c .bin, a .gguf file or "
                            "a Hugging Face directory)");
    return fileError(dir, "no config.json (expected a Hugging Face model "
                          "directory)");
  }
  Expected<json::Value> cfgJson =
      readJsonFile(cfgPath, kMaxJsonConfigBytes, "a JSON file");
  if (!cfgJson)
    return cfgJson.takeError();
  const json::Object *cfg = cfgJson->getAsObject();
  if (!cfg)
    return fileError(cfgPath, "expected a JSON object at the top level");

  // Architecture: Llama and the Llama-family variants (Qwen2: q/k/v biases;
  // Mistral: sliding window).
  const json::Array *archs = cfg->getArray("architectures");
  std::string arch;
  std::string archList;
  auto archOf = [](StringRef name) -> StringRef {
    return StringSwitch<StringRef>(name)
        .Cases({"LlamaForCausalLM", "llama"}, "llama")
        .Cases({"Qwen2ForCausalLM", "qwen2"}, "qwen2")
        .Cases({"MistralForCausalLM", "mistral"}, "mistral")
        .Default("");
  };
  if (archs) {
    for (const json::Value &a : *archs) {
      std::optional<StringRef> s = a.getAsString();
      if (!s)
        continue;
      archList += (archList.empty() ? "'" : ", '") + s->str() + "'";
      if (arch.empty())
        arch = archOf(*s).str();
    }
  } else {
    if (std::optional<StringRef> type = cfg->getString("model_type"))
      arch = archOf(*type).str();
    archList = "none";
  }
  if (arch.empty())
    return fileError(cfgPath, "unsupported architectures [" + archList +
                                  "] (expected 'LlamaForCausalLM', "
                                  "'Qwen2ForCausalLM' or 'MistralForCausalLM')");

  ModelDesc model;
  LlamaConfig &c = model.config;
  c.architecture = arch;
  StringRef trimmed = dir;
  while (trimmed.size() > 1 && sys::path::is_separator(trimmed.back()))
    trimmed = trimmed.drop_back();
  c.name = sys::path::filename(trimmed).str();
  if (c.name.empty() || c.name == ".")
    c.name = "hf-model";
  c.sourceFormat = "hf";
  c.sourcePath = dir.str();

  auto intField = [&](StringRef key, std::optional<int64_t> dflt,
                      int64_t &dst) -> Error {
    const json::Value *v = cfg->get(key);
    if (!v || v->kind() == json::Value::Null) {
      if (dflt) {
        dst = *dflt;
        return Error::success();
      }
      return fileError(cfgPath, "missing integer field '" + key + "'");
    }
    std::optional<int64_t> i = v->getAsInteger();
    if (!i)
      return fileError(cfgPath, "field '" + key + "' is " + formatJson(*v) +
                                    ", expected an integer");
    dst = *i;
    return Error::success();
  };
  if (Error e = intField("hidden_size", std::nullopt, c.dim))
    return std::move(e);
  if (Error e = intField("intermediate_size", std::nullopt, c.hiddenDim))
    return std::move(e);
  if (Error e = intField("num_hidden_layers", std::nullopt, c.nLayers))
    return std::move(e);
  if (Error e = intField("num_attention_heads", std::nullopt, c.nHeads))
    return std::move(e);
  if (Error e = intField("num_key_value_heads", c.nHeads, c.nKvHeads))
    return std::move(e);
  if (Error e = intField("vocab_size", std::nullopt, c.vocabSize))
    return std::move(e);
  if (Error e = intField("max_position_embeddings", 2048, c.maxSeqLen))
    return std::move(e);
  if (c.nHeads > 0 && !cfg->get("head_dim") && c.dim % c.nHeads != 0)
    return fileError(cfgPath, "hidden_size " + Twine(c.dim) +
                                  " is not a multiple of num_attention_heads " +
                                  Twine(c.nHeads));
  if (Error e =
          intField("head_dim", c.nHeads > 0 ? c.dim / c.nHeads : 0, c.headDim))
    return std::move(e);

  auto numField = [&](StringRef key, double dflt, float &dst) -> Error {
    const json::Value *v = cfg->get(key);
    if (!v || v->kind() == json::Value::Null) {
      dst = static_cast<float>(dflt);
      return Error::success();
    }
    std::optional<double> d = v->getAsNumber();
    if (!d)
      return fileError(cfgPath, "field '" + key + "' is " + formatJson(*v) +
                                    ", expected a number");
    dst = static_cast<float>(*d);
    return Error::success();
  };
  if (Error e = numField("rms_norm_eps", 1e-6, c.rmsNormEps))
    return std::move(e);
  if (Error e = readRopeConfig(*cfg, cfgPath, c))
    return std::move(e);
  // Booleans and strings are strict: "true" (a string) or 1 is an error, not
  // silently false.
  auto boolField = [&](StringRef key) -> Expected<std::optional<bool>> {
    const json::Value *v = cfg->get(key);
    if (!v || v->kind() == json::Value::Null)
      return std::nullopt;
    if (std::optional<bool> b = v->getAsBoolean())
      return *b;
    return fileError(cfgPath, "field '" + key + "' is " + formatJson(*v) +
                                  ", expected true or false");
  };
  for (StringRef key : {"attention_bias", "mlp_bias"}) {
    Expected<std::optional<bool>> bias = boolField(key);
    if (!bias)
      return bias.takeError();
    if (bias->value_or(false))
      return fileError(cfgPath,
                       "field '" + key + "' is true; " +
                           (key == "attention_bias"
                                ? "biases on all four attention projections "
                                  "(o_proj included) are not supported (only "
                                  "Qwen2's q/k/v biases are)"
                                : "MLP biases are not supported"));
  }
  // Qwen2 always has q/k/v biases (and no o_proj bias).
  c.qkvBias = arch == "qwen2";
  if (Error e = readSlidingWindow(*cfg, cfgPath, arch, c))
    return std::move(e);
  if (const json::Value *act = cfg->get("hidden_act");
      act && act->kind() != json::Value::Null &&
      act->getAsString() != std::optional<StringRef>("silu"))
    return fileError(cfgPath, "hidden_act " + formatJson(*act) +
                                  " is not supported (expected \"silu\")");
  // Absent means false, as in transformers' LlamaConfig.
  Expected<std::optional<bool>> tieField = boolField("tie_word_embeddings");
  if (!tieField)
    return tieField.takeError();
  bool tieFlag = tieField->value_or(false);
  if (Error e = checkConfig(c, cfgPath))
    return std::move(e);
  // GPTQ / AWQ checkpoints: linears stay quantized (Prequantized.h).
  Expected<std::optional<HfQuantConfig>> quantConfig =
      parseHfQuantConfig(*cfg, cfgPath);
  if (!quantConfig)
    return quantConfig.takeError();

  // Tensors.
  Expected<std::vector<std::string>> shards = listShards(dir);
  if (!shards)
    return shards.takeError();
  SafetensorsIndex index;
  for (const std::string &f : *shards)
    if (Error e = parseSafetensors(f, index))
      return std::move(e);

  auto find = [&](StringRef name) -> const SafeTensor * {
    auto it = index.tensors.find(name);
    if (it != index.tensors.end())
      return &it->second;
    auto alias = index.aliases.find(name);
    if (alias == index.aliases.end())
      return nullptr;
    it = index.tensors.find(alias->second);
    return it == index.tensors.end() ? nullptr : &it->second;
  };
  auto missing = [&](StringRef name) {
    return fileError(dir, "missing tensor '" + name + "' in " +
                              Twine(shards->size()) + " safetensors file(s)");
  };

  SmallVector<StringRef> tensorNames;
  for (const auto &entry : index.tensors)
    tensorNames.push_back(entry.getKey());
  if (Error e = checkNoExtraLayers(dir, tensorNames, "model.layers.",
                                   c.nLayers,
                                   "config.json num_hidden_layers"))
    return std::move(e);

  // Bias tensors the configuration does not account for would be dropped
  // silently: refuse them.
  for (StringRef t : tensorNames) {
    if (!t.starts_with("model.layers.") || !t.ends_with(".bias"))
      continue;
    bool qkv = t.ends_with(".q_proj.bias") || t.ends_with(".k_proj.bias") ||
               t.ends_with(".v_proj.bias");
    if (!(qkv && c.qkvBias))
      return fileError(dir, "holds bias tensor '" + t + "', but " +
                                (qkv ? "the '" + arch +
                                           "' architecture in config.json has "
                                           "no q/k/v projection biases"
                                     : std::string("only q/k/v projection "
                                                   "biases (Qwen2) are "
                                                   "supported")));
  }
  std::vector<CanonicalWeight> canon = canonicalWeights(c);
  if (*quantConfig && find("lm_head.qweight"))
    return fileError(dir, "tensor 'lm_head.qweight': a quantized classifier "
                          "(lm_head) is not supported; the classifier must be "
                          "stored as float (lm_head.weight)");
  // Embedding and classifier, handling every way ties are stored.
  const SafeTensor *embed = find("model.embed_tokens.weight");
  const SafeTensor *head = index.tensors.count("lm_head.weight")
                               ? &index.tensors["lm_head.weight"]
                               : nullptr;
  bool aliased = index.aliases.count("model.embed_tokens.weight") ||
                 index.aliases.count("lm_head.weight");
  if (!embed && head && (tieFlag || aliased))
    embed = head; // TinyStories-656K: only lm_head, embed is an alias.
  if (!embed)
    return missing("model.embed_tokens.weight");
  // Tied embeddings, resolved the safe way. Only an embedding: tied if the
  // config or a safetensors alias says so, else the classifier is missing
  // (never a silent tie). Both stored: a tied config whose lm_head differs
  // from the embedding uses the real lm_head, with a note.
  bool tied;
  if (!head || head == embed) {
    if (!tieFlag && !aliased)
      return fileError(dir, "missing tensor 'lm_head.weight' (the classifier) "
                            "in " + Twine(shards->size()) +
                            " safetensors file(s): config.json has "
                            "tie_word_embeddings " +
                            (*tieField ? "false" : "unset (false for Llama)") +
                            ", so the classifier is not the embedding; set "
                            "\"tie_word_embeddings\": true if it is");
    tied = true;
  } else if (tieFlag) {
    Expected<bool> same = sameTensorData(*head, *embed);
    if (!same)
      return same.takeError();
    tied = *same;
    if (!tied)
      model.notes.push_back(
          cfgPath + " has tie_word_embeddings true but " + head->file +
          " stores an 'lm_head.weight' that differs from "
          "'model.embed_tokens.weight'; using the stored lm_head.weight as "
          "the classifier");
  } else {
    tied = false;
  }
  c.tiedEmbeddings = tied;

  for (const CanonicalWeight &cw : canon) {
    std::string name = hfName(cw.name);
    WeightDesc w;
    w.name = cw.name;
    if (cw.name == "output") {
      w.source = model.weights.front().source;
      if (!tied) {
        Expected<TensorSource> s = makeSource(*head, name, cw.shape);
        if (!s)
          return s.takeError();
        w.source = std::move(*s);
      }
      model.weights.push_back(std::move(w));
      continue;
    }
    StringRef what = StringRef(cw.name).rsplit('.').second;
    std::vector<WeightTransform> rowTransforms;
    if (what == "wq" || what == "bq")
      rowTransforms.push_back(
          {WeightTransform::Kind::RopeHalfToAdjacent, c.nHeads});
    else if (what == "wk" || what == "bk")
      rowTransforms.push_back(
          {WeightTransform::Kind::RopeHalfToAdjacent, c.nKvHeads});
    StringRef prefix = StringRef(name).drop_back(strlen(".weight"));
    if (*quantConfig && cw.shape.size() == 2 && cw.name != "tok_embeddings" &&
        !find(name)) {
      Expected<WeightDesc> q = importHfQuantizedLinear(
          **quantConfig, cw.name, prefix, cw.shape,
          [&](StringRef n) -> std::optional<CheckpointTensor> {
            const SafeTensor *t = find(n);
            if (!t)
              return std::nullopt;
            return CheckpointTensor{t->file, t->dtype, t->shape, t->offset,
                                    t->bytes};
          },
          rowTransforms);
      if (!q)
        return q.takeError();
      model.weights.push_back(std::move(*q));
      continue;
    }
    const SafeTensor *st =
        cw.name == "tok_embeddings" ? embed : find(name);
    if (!st)
      return missing(name);
    Expected<TensorSource> s =
        makeSource(*st, cw.name == "tok_embeddings" && st == head
                            ? StringRef("lm_head.weight")
                            : StringRef(name),
                   cw.shape);
    if (!s)
      return s.takeError();
    w.source = std::move(*s);
    w.transforms = std::move(rowTransforms);
    model.weights.push_back(std::move(w));
  }

  // Tokenizer: explicit, else tokenizer.json / tokenizer.model beside. It
  // may have fewer pieces than vocab_size (padded embedding tables), never
  // more.
  std::string tokPath = tokenizer.str();
  if (tokPath.empty()) {
    for (StringRef f : {"tokenizer.json", "tokenizer.model"}) {
      std::string p = joinPath(dir, f);
      if (sys::fs::exists(p)) {
        tokPath = p;
        break;
      }
    }
  }
  if (tokPath.empty())
    return fileError(dir, "no tokenizer.json or tokenizer.model (pass "
                          "--tokenizer FILE)");
  Expected<TokenizerDesc> tok = readTokenizer(tokPath);
  if (!tok)
    return tok.takeError();
  if (Error e = fitTokenizer(*tok, tokPath, c.vocabSize,
                             /*allowPadding=*/true))
    return std::move(e);
  model.tokenizer = std::move(*tok);
  if (Error e = chatFromHf(dir, model))
    return std::move(e);
  return model;
}

} // namespace mlir::kiln
