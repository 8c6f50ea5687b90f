//===- ArtifactWriterTest.cpp - weights.bin / tokenizer.json writers ------===//

#include "ImportTestUtils.h"

#include "codegen/Artifact/TokenizerWriter.h"
#include "codegen/Artifact/WeightWriter.h"
#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/Prequantized.h"
#include "runtime/include/kiln_rt/block_formats.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <cmath>
#include <cstring>
#include <set>
#include <xxhash.h>

using namespace mlir::kiln;
using namespace kiln::test;

namespace {

void checkWeightsFile(const ModelDesc &m, const std::string &path,
                      const std::vector<WrittenTensor> &written) {
  ASSERT_EQ(written.size(), m.weights.size());
  std::string bytes = readFileBytes(path);
  uint64_t end = 0;
  for (size_t i = 0; i < written.size(); ++i) {
    const WrittenTensor &t = written[i];
    EXPECT_EQ(t.name, m.weights[i].name);
    EXPECT_EQ(t.offset % kWeightAlignment, 0u) << t.name;
    EXPECT_EQ(t.shape, m.weights[i].source.shape);
    ASSERT_LE(t.offset + t.bytes, bytes.size()) << t.name;
    std::vector<float> expected = materialize(m.weights[i]);
    ASSERT_EQ(expected.size() * 4, t.bytes);
    EXPECT_EQ(std::memcmp(bytes.data() + t.offset, expected.data(), t.bytes),
              0)
        << t.name;
    end = std::max(end, t.offset + t.bytes);
  }
  EXPECT_EQ(bytes.size(), (end + 63) / 64 * 64);
}

TEST(WeightWriter, Stories260KDeduplicatesTiedOutput) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> m =
      importModel(modelPath("stories260K/stories260K.gguf"));
  ASSERT_TRUE(bool(m)) << errorMessage(m);
  TempDir dir;
  std::string path = dir.path("weights.bin");
  llvm::Expected<std::vector<WrittenTensor>> written =
      writeWeightsFile(path, m->weights);
  ASSERT_TRUE(bool(written)) << errorMessage(written);
  checkWeightsFile(*m, path, *written);
  EXPECT_EQ(written->back().name, "output");
  EXPECT_EQ(written->back().offset, written->front().offset);
  EXPECT_EQ(written->front().offset, 0u);
}

TEST(WeightWriter, HfTransformsAndSynthetic) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<ModelDesc> hf = importModel(modelPath("tinystories-656k/hf"));
  ASSERT_TRUE(bool(hf)) << errorMessage(hf);
  TempDir dir;
  std::string path = dir.path("weights.bin");
  llvm::Expected<std::vector<WrittenTensor>> written =
      writeWeightsFile(path, hf->weights);
  ASSERT_TRUE(bool(written)) << errorMessage(written);
  checkWeightsFile(*hf, path, *written);

  llvm::Expected<ModelDesc> syn = importModel("synthetic:stories260k");
  ASSERT_TRUE(bool(syn)) << errorMessage(syn);
  written = writeWeightsFile(path, syn->weights);
  ASSERT_TRUE(bool(written)) << errorMessage(written);
  checkWeightsFile(*syn, path, *written);
  EXPECT_EQ(written->back().offset, written->front().offset);
}

TEST(WeightWriter, Errors) {
  llvm::Expected<ModelDesc> syn = importModel("synthetic:stories260k");
  ASSERT_TRUE(bool(syn)) << errorMessage(syn);
  llvm::Expected<std::vector<WrittenTensor>> written =
      writeWeightsFile("/nonexistent-dir/weights.bin", syn->weights);
  std::string msg = errorMessage(written);
  EXPECT_NE(msg.find("/nonexistent-dir/weights.bin"), std::string::npos)
      << msg;

  // A source that vanished: the error names the file and the partial
  // output is removed.
  TempDir dir;
  WeightDesc w;
  w.name = "norm";
  w.source.file = dir.path("gone.bin");
  w.source.tensor = "rms_final_weight";
  w.source.shape = {64};
  w.source.bytes = 256;
  w.source.offset = 28;
  std::string out = dir.path("weights.bin");
  written = writeWeightsFile(out, {w});
  msg = errorMessage(written);
  EXPECT_NE(msg.find("gone.bin"), std::string::npos) << msg;
  EXPECT_FALSE(llvm::sys::fs::exists(out));
}

/// Writes `w` (float32 [rows, cols]) to DIR/w.bin and returns a recipe
/// reading it whole (tensor "w", no transforms).
WeightDesc floatMatrixSource(TempDir &dir, const std::vector<float> &w,
                             int64_t rows, int64_t cols) {
  WeightDesc d;
  d.source.file = dir.path("w.bin");
  d.source.tensor = "w";
  d.source.shape = {rows, cols};
  d.source.bytes = uint64_t(rows * cols) * 4;
  std::error_code ec;
  llvm::raw_fd_ostream os(d.source.file, ec);
  EXPECT_FALSE(ec) << d.source.file;
  os.write(reinterpret_cast<const char *>(w.data()), w.size() * 4);
  return d;
}

/// 8-bit "quantize" with group_size > 0 (GGUF Q8_0-like groups): scales
/// [rows, ceil(cols / G)], each max|w_group| / 127, q = round(w / scale)
/// (ties away from zero), the last group of a row shorter; group_size 0
/// keeps one scale per row.
TEST(WeightWriter, GroupwiseInt8) {
  const int64_t rows = 3, cols = 70, group = 32, groups = 3; // 32 + 32 + 6
  std::vector<float> w(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    w[i] = float((i * 37) % 101 - 50) / (i % 7 == 0 ? 8.0f : 64.0f);
  for (int64_t c = 32; c < 64; ++c) // row 0, group 1: all zero (scale 0)
    w[c] = 0.0f;
  w[1 * cols + 64] = 127.0f; // row 1, last group: scale 1, exact
  w[1 * cols + 65] = 2.5f;   // a tie: rounds away from zero to 3
  w[1 * cols + 66] = -2.5f;
  TempDir dir;
  const WeightDesc source = floatMatrixSource(dir, w, rows, cols);
  auto desc = [&](llvm::StringRef name, int64_t gs,
                  WeightTransform::QuantPart part) {
    WeightDesc d = source;
    d.name = name.str();
    WeightTransform t;
    t.kind = WeightTransform::Kind::Quantize;
    t.bits = 8;
    t.groupSize = gs;
    t.part = part;
    d.transforms.push_back(t);
    return d;
  };
  std::vector<WeightDesc> ws = {
      desc("g.qweight", group, WeightTransform::QuantPart::QWeight),
      desc("g.scales", group, WeightTransform::QuantPart::Scales),
      desc("c.scales", 0, WeightTransform::QuantPart::Scales)};
  std::string out = dir.path("weights.bin");
  llvm::Expected<std::vector<WrittenTensor>> written =
      writeWeightsFile(out, ws);
  ASSERT_TRUE(bool(written)) << errorMessage(written);
  ASSERT_EQ(written->size(), 3u);
  const WrittenTensor &q = (*written)[0], &s = (*written)[1],
                      &sc = (*written)[2];
  EXPECT_EQ(q.shape, (llvm::SmallVector<int64_t, 2>{rows, cols}));
  EXPECT_EQ(q.dtype, "i8");
  EXPECT_EQ(s.shape, (llvm::SmallVector<int64_t, 2>{rows, groups}));
  EXPECT_EQ(s.bytes, uint64_t(rows * groups * 4));
  EXPECT_EQ(sc.shape, (llvm::SmallVector<int64_t, 2>{rows}));
  std::string bytes = readFileBytes(out);
  ASSERT_LE(sc.offset + sc.bytes, bytes.size());
  for (int64_t r = 0; r < rows; ++r) {
    float rowMax = 0.0f;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t c0 = g * group, c1 = std::min(cols, c0 + group);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c)
        amax = std::max(amax, std::fabs(w[r * cols + c]));
      rowMax = std::max(rowMax, amax);
      float scale;
      std::memcpy(&scale, bytes.data() + s.offset + 4 * (r * groups + g), 4);
      EXPECT_EQ(scale, amax / 127.0f) << r << "," << g;
      for (int64_t c = c0; c < c1; ++c) {
        int got = int8_t(bytes[q.offset + r * cols + c]);
        int want = scale > 0 ? int(std::lround(w[r * cols + c] / scale)) : 0;
        EXPECT_EQ(got, want) << r << "," << c;
      }
    }
    float perRow;
    std::memcpy(&perRow, bytes.data() + sc.offset + 4 * r, 4);
    EXPECT_EQ(perRow, rowMax / 127.0f) << r;
  }
  EXPECT_EQ(int8_t(bytes[q.offset + 1 * cols + 64]), 127);
  EXPECT_EQ(int8_t(bytes[q.offset + 1 * cols + 65]), 3);
  EXPECT_EQ(int8_t(bytes[q.offset + 1 * cols + 66]), -3);
}

/// "slice" (kiln-partition's tensor-parallel shards): rows (axis 0) and
/// columns (axis 1) of the float tensor, after the row permutations and
/// before quantization; two slices of one source are two tensors (not
/// deduplicated as the same bytes); the quantized shard is the shard
/// quantized on its own.
TEST(WeightWriter, Slices) {
  const int64_t rows = 6, cols = 8;
  std::vector<float> w(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    w[i] = float(i) - 20.0f;
  TempDir dir;
  const WeightDesc source = floatMatrixSource(dir, w, rows, cols);
  auto desc = [&](llvm::StringRef name, int64_t axis, int64_t offset,
                  int64_t size) {
    WeightDesc d = source;
    d.name = name.str();
    WeightTransform t;
    t.kind = WeightTransform::Kind::Slice;
    t.axis = axis;
    t.offset = offset;
    t.size = size;
    d.transforms.push_back(t);
    return d;
  };
  WeightDesc quant = desc("q.qweight", 1, 4, 4);
  WeightTransform qt;
  qt.kind = WeightTransform::Kind::Quantize;
  qt.bits = 8;
  qt.part = WeightTransform::QuantPart::QWeight;
  quant.transforms.push_back(qt);
  WeightDesc quantScales = quant;
  quantScales.name = "q.scales";
  quantScales.transforms.back().part = WeightTransform::QuantPart::Scales;
  std::vector<WeightDesc> ws = {desc("rows", 0, 2, 3), desc("cols0", 1, 0, 4),
                                desc("cols1", 1, 4, 4), quant, quantScales};
  std::string out = dir.path("weights.bin");
  llvm::Expected<std::vector<WrittenTensor>> written = writeWeightsFile(out, ws);
  ASSERT_TRUE(bool(written)) << errorMessage(written);
  ASSERT_EQ(written->size(), 5u);
  std::string bytes = readFileBytes(out);
  auto at = [&](const WrittenTensor &t, int64_t i) {
    float v;
    std::memcpy(&v, bytes.data() + t.offset + 4 * i, 4);
    return v;
  };
  const WrittenTensor &r = (*written)[0], &c0 = (*written)[1],
                      &c1 = (*written)[2], &q = (*written)[3],
                      &qs = (*written)[4];
  EXPECT_EQ(r.shape, (llvm::SmallVector<int64_t, 2>{3, cols}));
  EXPECT_EQ(c0.shape, (llvm::SmallVector<int64_t, 2>{rows, 4}));
  EXPECT_NE(c0.offset, c1.offset) << "two slices deduplicated as one tensor";
  for (int64_t i = 0; i < 3 * cols; ++i)
    ASSERT_EQ(at(r, i), w[2 * cols + i]) << i;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      ASSERT_EQ(at(c0, i * 4 + j), w[i * cols + j]) << i << "," << j;
      ASSERT_EQ(at(c1, i * 4 + j), w[i * cols + 4 + j]) << i << "," << j;
    }
  // The shard [rows, 4] quantized per row on its own.
  EXPECT_EQ(q.shape, (llvm::SmallVector<int64_t, 2>{rows, 4}));
  EXPECT_EQ(qs.shape, (llvm::SmallVector<int64_t, 2>{rows}));
  for (int64_t i = 0; i < rows; ++i) {
    float amax = 0.0f;
    for (int64_t j = 4; j < 8; ++j)
      amax = std::max(amax, std::fabs(w[i * cols + j]));
    EXPECT_EQ(at(qs, i), amax / 127.0f) << i;
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_EQ(int(int8_t(bytes[q.offset + i * 4 + j])),
                int(std::lround(w[i * cols + 4 + j] / (amax / 127.0f))))
          << i << "," << j;
  }
  // A slice beyond the tensor is an error naming the weight.
  std::vector<WeightDesc> bad = {desc("oob", 1, 6, 4)};
  llvm::Expected<std::vector<WrittenTensor>> badWritten =
      writeWeightsFile(dir.path("bad.bin"), bad);
  std::string msg = errorMessage(badWritten);
  EXPECT_NE(msg.find("'oob'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("slice [6, 10) along axis 1 does not fit shape"),
            std::string::npos)
      << msg;
}

/// Writes a [rows, cols] tensor of pseudo-random GGML blocks of `storage`
/// (Q4_1 or Q4_K: their f16 fields d and m / dmin, the first four bytes of
/// a block, are set to finite values) to DIR/<name>.bin and returns a recipe
/// keeping it as stored (keepGgufBlocks: one "repack" of part blocks).
WeightDesc blockMatrixSource(TempDir &dir, llvm::StringRef name,
                             StorageType storage, int64_t rows, int64_t cols) {
  const int64_t format = *blockFormatOf(storage);
  const int64_t elems = kiln_block_elems(format),
                blockBytes = kiln_block_bytes(format);
  std::string bytes(size_t(rows * cols / elems * blockBytes), '\0');
  uint32_t state = 12345;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (char &c : bytes)
    c = static_cast<char>(next() >> 24);
  // Random sign, exponent 8..11: |d|, |m| in [2^-7, 2^-3).
  for (size_t b = 0; b < bytes.size(); b += size_t(blockBytes))
    for (size_t f = 0; f < 2; ++f) {
      uint16_t half = uint16_t((next() >> 16) & 0x8fff) | 0x2000;
      bytes[b + 2 * f] = static_cast<char>(half & 0xff);
      bytes[b + 2 * f + 1] = static_cast<char>(half >> 8);
    }
  WeightDesc d;
  d.name = name.str();
  d.source.file = dir.path(name.str() + ".bin");
  d.source.tensor = name.str();
  d.source.storage = storage;
  d.source.shape = {rows, cols};
  d.source.bytes = bytes.size();
  writeFileBytes(d.source.file, bytes);
  keepGgufBlocks(d);
  return d;
}

/// "slice" of a weight kept in a GGML block format (kiln-partition of GGUF
/// linears): [repack blocks, slice] writes the rank's shard of raw blocks
/// without decoding them: whole rows (axis 0), or whole blocks of every row
/// (axis 1). Decoded with the block codec, each shard equals the matching
/// slice of the whole weight decoded (materializeWeight, the float path);
/// a column slice that would cut a block is refused.
TEST(WeightWriter, SlicesBlocks) {
  struct Case {
    StorageType storage;
    int64_t rows, cols, tp;
  };
  // Q4_1: 3 blocks of 32 per row over 3 ranks; Q4_K: 2 of 256 over 2.
  for (Case c : {Case{StorageType::Q4_1, 6, 96, 3},
                 Case{StorageType::Q4_K, 4, 512, 2}}) {
    const std::string fmt = stringifyStorageType(c.storage).str();
    SCOPED_TRACE(fmt);
    const int64_t format = *blockFormatOf(c.storage);
    const int64_t elems = kiln_block_elems(format),
                  blockBytes = kiln_block_bytes(format);
    const int64_t rowBytes = c.cols / elems * blockBytes;
    TempDir dir;
    const WeightDesc whole =
        blockMatrixSource(dir, fmt, c.storage, c.rows, c.cols);
    auto slice = [&](llvm::StringRef name, int64_t axis, int64_t offset,
                     int64_t size) {
      WeightDesc d = whole;
      d.name = name.str();
      WeightTransform t;
      t.kind = WeightTransform::Kind::Slice;
      t.axis = axis;
      t.offset = offset;
      t.size = size;
      d.transforms.push_back(t);
      return d;
    };
    const int64_t rowShard = c.rows / c.tp, colShard = c.cols / c.tp;
    std::vector<WeightDesc> ws;
    for (int64_t r = 0; r < c.tp; ++r) {
      ws.push_back(
          slice("rows" + std::to_string(r), 0, r * rowShard, rowShard));
      ws.push_back(
          slice("cols" + std::to_string(r), 1, r * colShard, colShard));
    }
    std::string out = dir.path("weights.bin");
    llvm::Expected<std::vector<WrittenTensor>> written =
        writeWeightsFile(out, ws);
    ASSERT_TRUE(bool(written)) << errorMessage(written);
    ASSERT_EQ(written->size(), ws.size());
    const std::string bytes = readFileBytes(out);
    const std::string stored = readFileBytes(whole.source.file);
    // The whole weight dequantized (materializeWeight's float path).
    const std::vector<float> dequantized = materialize(whole);
    ASSERT_EQ(dequantized.size(), size_t(c.rows * c.cols));
    for (size_t i = 0; i < ws.size(); ++i) {
      const WeightDesc &d = ws[i];
      const WrittenTensor &t = (*written)[i];
      SCOPED_TRACE(d.name);
      const WeightTransform &sl = d.transforms.back();
      const int64_t rows = sl.axis == 0 ? sl.size : c.rows,
                    cols = sl.axis == 1 ? sl.size : c.cols;
      EXPECT_EQ(t.dtype, "i8");
      EXPECT_EQ(t.shape, (llvm::SmallVector<int64_t, 2>{rows, cols / elems *
                                                                  blockBytes}));
      ASSERT_EQ(t.bytes, uint64_t(rows * cols / elems * blockBytes));
      ASSERT_LE(t.offset + t.bytes, bytes.size());
      const char *shard = bytes.data() + t.offset;
      // The raw bytes: a contiguous range of rows, or in every row a range
      // of whole blocks.
      for (int64_t o = 0; o < rows; ++o) {
        const int64_t srcRow = sl.axis == 0 ? sl.offset + o : o;
        const int64_t srcByte =
            sl.axis == 1 ? sl.offset / elems * blockBytes : 0;
        const int64_t n = cols / elems * blockBytes;
        ASSERT_EQ(std::memcmp(shard + o * n,
                              stored.data() + srcRow * rowBytes + srcByte, n),
                  0)
            << "row " << o;
      }
      // Decoded, the shard is the slice of the whole weight decoded.
      std::vector<float> decoded(size_t(rows * cols));
      for (int64_t o = 0; o < rows; ++o)
        kiln_block_decode_row(format,
                              reinterpret_cast<const uint8_t *>(shard) +
                                  o * (cols / elems * blockBytes),
                              cols, decoded.data() + o * cols);
      for (int64_t o = 0; o < rows; ++o)
        for (int64_t j = 0; j < cols; ++j) {
          const int64_t srcRow = sl.axis == 0 ? sl.offset + o : o,
                        srcCol = sl.axis == 1 ? sl.offset + j : j;
          ASSERT_EQ(decoded[o * cols + j],
                    dequantized[srcRow * c.cols + srcCol])
              << o << "," << j;
        }
      EXPECT_TRUE(
          llvm::all_of(decoded, [](float v) { return std::isfinite(v); }));
    }
    // Each rank's shard is its own tensor (the slice is part of the
    // deduplication key).
    std::set<uint64_t> offsets;
    for (const WrittenTensor &t : *written)
      offsets.insert(t.offset);
    EXPECT_EQ(offsets.size(), written->size());
    // A column shard cutting a block is refused, naming the weight.
    const int64_t half = elems / 2;
    llvm::Expected<std::vector<WrittenTensor>> straddle = writeWeightsFile(
        dir.path("bad.bin"), {slice("straddle", 1, half, elems)});
    std::string msg = errorMessage(straddle);
    EXPECT_NE(msg.find("weight 'straddle' (" + fmt + ", blocks of " +
                       std::to_string(elems) + "): columns [" +
                       std::to_string(half) + ", " +
                       std::to_string(half + elems) +
                       ") do not hold whole blocks"),
              std::string::npos)
        << msg;
  }
}

TEST(WeightWriter, HashFileXXH3) {
  TempDir dir;
  std::string empty = dir.path("empty");
  writeFileBytes(empty, "");
  llvm::Expected<std::string> h = hashFileXXH3(empty);
  ASSERT_TRUE(bool(h)) << errorMessage(h);
  EXPECT_EQ(*h, "2d06800538d394c2"); // XXH3_64bits("")

  // Several 1 MiB chunks plus a tail agree with the one-shot hash.
  std::string data(3 * (1 << 20) + 12345, '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>((i * 2654435761u) >> 13);
  std::string big = dir.path("big");
  writeFileBytes(big, data);
  h = hashFileXXH3(big);
  ASSERT_TRUE(bool(h)) << errorMessage(h);
  uint64_t expected = XXH3_64bits(data.data(), data.size());
  std::string hex = llvm::utohexstr(expected, /*LowerCase=*/true, 16);
  EXPECT_EQ(*h, hex);
  EXPECT_EQ(h->size(), 16u);

  llvm::Expected<std::string> missing = hashFileXXH3(dir.path("nope"));
  EXPECT_NE(errorMessage(missing).find("nope"), std::string::npos);
}

// One pass gives both manifest hashes; BLAKE2b-256 of "abc" as Python's
// hashlib.blake2b(b"abc", digest_size=32).hexdigest().
TEST(WeightWriter, HashFileForManifest) {
  TempDir dir;
  std::string abc = dir.path("abc");
  writeFileBytes(abc, "abc");
  llvm::Expected<FileHashes> h = hashFileForManifest(abc);
  ASSERT_TRUE(bool(h)) << errorMessage(h);
  EXPECT_EQ(h->blake2b,
            "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
  EXPECT_EQ(h->xxh3, llvm::utohexstr(XXH3_64bits("abc", 3), true, 16));
  llvm::Expected<FileHashes> missing = hashFileForManifest(dir.path("nope"));
  EXPECT_NE(errorMessage(missing).find("nope"), std::string::npos);
}

TEST(TokenizerWriter, Tok512RoundTrip) {
  KILN_REQUIRE_MODELS();
  llvm::Expected<TokenizerDesc> tok =
      readTokenizer(modelPath("stories260K/tok512.bin"));
  ASSERT_TRUE(bool(tok)) << errorMessage(tok);
  TempDir dir;
  std::string path = dir.path("tokenizer.json");
  llvm::Error e = writeTokenizerJson(path, *tok);
  ASSERT_FALSE(bool(e)) << errorMessage(std::move(e));
  llvm::Expected<llvm::json::Value> v = llvm::json::parse(readFileBytes(path));
  ASSERT_TRUE(bool(v)) << errorMessage(v);
  const llvm::json::Object *o = v->getAsObject();
  ASSERT_NE(o, nullptr);
  EXPECT_EQ(o->getString("format"), std::optional<llvm::StringRef>(
                                        "kiln-tokenizer"));
  EXPECT_EQ(o->getInteger("version"), std::optional<int64_t>(1));
  EXPECT_EQ(o->getString("model"), std::optional<llvm::StringRef>("spm"));
  const llvm::json::Array *pieces = o->getArray("pieces_hex");
  ASSERT_NE(pieces, nullptr);
  ASSERT_EQ(pieces->size(), 512u);
  EXPECT_EQ((*pieces)[0].getAsString(),
            std::optional<llvm::StringRef>("3c756e6b3e")); // <unk>
  EXPECT_EQ((*pieces)[1].getAsString(),
            std::optional<llvm::StringRef>("3c733e")); // <s>
  for (size_t i = 0; i < 512; ++i)
    EXPECT_EQ(llvm::fromHex(*(*pieces)[i].getAsString()), tok->pieces[i]);
  EXPECT_EQ(o->getArray("scores")->size(), 512u);
  EXPECT_EQ((*o->getArray("types"))[0].getAsInteger(),
            std::optional<int64_t>(2));
  EXPECT_EQ(o->getArray("merges")->size(), 0u);
  EXPECT_EQ(o->getInteger("bos_id"), std::optional<int64_t>(1));
  EXPECT_EQ(o->getInteger("eos_id"), std::optional<int64_t>(2));
  EXPECT_EQ(o->getInteger("unk_id"), std::optional<int64_t>(0));
  EXPECT_EQ(o->getBoolean("add_bos"), std::optional<bool>(true));
  EXPECT_EQ(o->getBoolean("add_dummy_prefix"), std::optional<bool>(true));
  EXPECT_EQ(o->getBoolean("byte_fallback"), std::optional<bool>(true));

  TokenizerDesc broken = *tok;
  broken.scores.pop_back();
  e = writeTokenizerJson(path, broken);
  std::string msg = errorMessage(std::move(e));
  EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("511 scores"), std::string::npos) << msg;
}

} // namespace
