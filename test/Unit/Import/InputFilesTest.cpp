//===- InputFilesTest.cpp - regular files, size limits, JSON depth --------===//
//
// The helpers every compiler-side reader goes through (ImportUtils.h): a
// FIFO, device or directory is refused before anything blocks on it, whole-
// file reads are bounded, JSON nesting is bounded before llvm::json::parse
// recurses. End-to-end cases (kiln-compile, kiln-calibrate, kiln-eval on
// hostile files) are in test/Import/hostile-files.test.
//
//===----------------------------------------------------------------------===//

#include "ImportTestUtils.h"

#include "dialects/Kiln/Import/ImportUtils.h"
#include "dialects/Kiln/Import/Importers.h"
#include "dialects/Kiln/Import/ModelDesc.h"

#include "gtest/gtest.h"

#include <string>

#include <sys/stat.h>
#include <unistd.h>

using namespace mlir::kiln;
using namespace mlir::kiln::detail;
using namespace kiln::test;
using llvm::Expected;

namespace {

#define EXPECT_CONTAINS(haystack, needle)                                      \
  do {                                                                         \
    std::string h_ = (haystack);                                               \
    EXPECT_NE(h_.find(needle), std::string::npos)                              \
        << "expected to find: " << (needle) << "\nin: " << h_;                 \
  } while (0)

std::string nested(size_t depth, const std::string &inner = "") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

TEST(InputFiles, JsonDepthLimit) {
  EXPECT_FALSE(errorMessage(checkJsonDepth(nested(kMaxJsonDepth), "f")).size());
  EXPECT_EQ(errorMessage(checkJsonDepth(nested(kMaxJsonDepth + 1), "f.json")),
            "f.json: JSON nested deeper than 256 at offset 256");
  // Objects count too; offsets are absolute (a safetensors header starts at
  // byte 8).
  std::string objects;
  for (unsigned i = 0; i < 300; ++i)
    objects += "{\"a\":";
  EXPECT_EQ(errorMessage(checkJsonDepth(objects, "h", /*baseOffset=*/8)),
            "h: JSON nested deeper than 256 at offset " +
                std::to_string(8 + 256 * 5));
  // Brackets inside strings, with escaped quotes and backslashes, are text.
  std::string text = "{\"s\": \"" + std::string(1000, '[') + "\\\"" +
                     std::string(1000, '{') + "\\\\\", \"t\": [1]}";
  EXPECT_FALSE(errorMessage(checkJsonDepth(text, "f")).size());
  // A lower limit is honoured.
  EXPECT_EQ(errorMessage(checkJsonDepth("[[[]]]", "g", 0, 2)),
            "g: JSON nested deeper than 2 at offset 2");
}

TEST(InputFiles, ReadJsonFileRejectsDeepNesting) {
  TempDir dir;
  std::string deep = dir.path("deep.json");
  writeFileBytes(deep, nested(50000));
  Expected<llvm::json::Value> v = readJsonFile(deep, kMaxJsonConfigBytes, "a JSON file");
  EXPECT_EQ(errorMessage(v), deep + ": JSON nested deeper than 256 at offset 256");
  std::string ok = dir.path("ok.json");
  writeFileBytes(ok, "{\"a\": [1, 2, {\"b\": null}]}");
  Expected<llvm::json::Value> good = readJsonFile(ok, kMaxJsonConfigBytes, "a JSON file");
  ASSERT_TRUE(bool(good)) << errorMessage(good);
  std::string bad = dir.path("bad.json");
  writeFileBytes(bad, "{\"a\": }");
  Expected<llvm::json::Value> invalid = readJsonFile(bad, kMaxJsonConfigBytes, "a JSON file");
  EXPECT_CONTAINS(errorMessage(invalid), bad + ": invalid JSON: ");
}

TEST(InputFiles, NonRegularFilesAreRefused) {
  TempDir dir;
  std::string fifo = dir.path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  // No writer ever opens the FIFO: a blocking open or read would hang here.
  EXPECT_EQ(errorMessage(checkRegularFile(fifo, "a tokenizer file")),
            fifo + ": is a FIFO (named pipe), expected a tokenizer file");
  uint64_t size = 0;
  Expected<int> fd = openRegularFile(fifo, "a model", UINT64_MAX, size);
  EXPECT_EQ(errorMessage(fd), fifo + ": is a FIFO (named pipe), expected a model");
  EXPECT_EQ(errorMessage(readRegularFile(fifo, 100, "a text file").takeError()),
            fifo + ": is a FIFO (named pipe), expected a text file");
  EXPECT_EQ(errorMessage(getFileSize(fifo, "a checkpoint file").takeError()),
            fifo + ": is a FIFO (named pipe), expected a checkpoint file");
  char buf[4];
  EXPECT_CONTAINS(errorMessage(readFileRange(fifo, 0, buf, "magic")),
                  fifo + ": is a FIFO (named pipe)");
  // Devices and directories.
  EXPECT_EQ(errorMessage(readRegularFile("/dev/zero", 100, "a tokenizer file")
                             .takeError()),
            "/dev/zero: is a character device, expected a tokenizer file");
  EXPECT_EQ(errorMessage(checkRegularFile(dir.root(), "a JSON file")),
            dir.root() + ": is a directory, expected a JSON file");
  EXPECT_EQ(errorMessage(checkRegularFile(dir.path("missing"), "a JSON file")),
            dir.path("missing") + ": cannot open: No such file or directory");
  // Importers go through them.
  EXPECT_EQ(errorMessage(importModel(fifo).takeError()),
            fifo + ": is a FIFO (named pipe), expected a checkpoint file");
  EXPECT_EQ(errorMessage(readTokenizer(fifo).takeError()),
            fifo + ": is a FIFO (named pipe), expected a tokenizer file");
  EXPECT_EQ(errorMessage(readTokenizer("/dev/zero").takeError()),
            "/dev/zero: is a character device, expected a tokenizer file");
}

TEST(InputFiles, SizeLimits) {
  TempDir dir;
  std::string f = dir.path("f.txt");
  writeFileBytes(f, std::string(101, 'x'));
  EXPECT_EQ(errorMessage(readRegularFile(f, 100, "a text file").takeError()),
            f + ": is 101 bytes, more than the limit of 100 bytes for a text "
                "file");
  Expected<std::unique_ptr<llvm::MemoryBuffer>> buf =
      readRegularFile(f, 101, "a text file");
  ASSERT_TRUE(bool(buf)) << errorMessage(buf.takeError());
  EXPECT_EQ((*buf)->getBufferSize(), 101u);
  // Symlinks to regular files are followed.
  std::string link = dir.path("link.txt");
  ASSERT_EQ(::symlink(f.c_str(), link.c_str()), 0);
  EXPECT_FALSE(errorMessage(checkRegularFile(link, "a text file")).size());
}

TEST(InputFiles, TokenizerSizeLimit) {
  TempDir dir;
  // A sparse file just over the limit: refused before it is read.
  std::string big = dir.path("tokenizer.json");
  writeFileBytes(big, "");
  ASSERT_EQ(::truncate(big.c_str(), kMaxTokenizerBytes + 1), 0);
  EXPECT_EQ(errorMessage(readTokenizer(big).takeError()),
            big + ": is " + std::to_string(kMaxTokenizerBytes + 1) +
                " bytes, more than the limit of " +
                std::to_string(kMaxTokenizerBytes) +
                " bytes for a JSON file");
}

} // namespace
