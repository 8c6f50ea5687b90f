//===- FuzzUtils.h - Shared helpers of the libFuzzer targets ----*- C++ -*-===//
//
// The importers and loaders take file paths, so every fuzz target writes its
// input into files of a per-process scratch directory (under /dev/shm when
// it exists) and calls the real entry point on them. Targets that need more
// than one file (a Hugging Face directory, an artifact) split their input
// into parts at kPartSeparator. Plain C++17 and POSIX: the runtime-only
// targets use this header too.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TEST_FUZZ_FUZZUTILS_H
#define KILN_TEST_FUZZ_FUZZUTILS_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace kiln::fuzz {

/// Separates the parts of a multi-file input (also in the dictionaries).
constexpr std::string_view kPartSeparator = "\n#kiln-fuzz-part\n";

/// Splits `data` at kPartSeparator; always returns at least `minParts`
/// parts (missing ones are empty).
inline std::vector<std::string_view> splitParts(const uint8_t *data,
                                                size_t size,
                                                size_t minParts = 1) {
  std::string_view rest(reinterpret_cast<const char *>(data), size);
  std::vector<std::string_view> parts;
  for (;;) {
    // memmem (libc) rather than string_view::find, which the coverage
    // instrumentation makes a per-byte cost on inputs of hundreds of KiB.
    const void *hit = ::memmem(rest.data(), rest.size(), kPartSeparator.data(),
                               kPartSeparator.size());
    if (!hit)
      break;
    size_t at = size_t(static_cast<const char *>(hit) - rest.data());
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + kPartSeparator.size());
  }
  parts.push_back(rest);
  while (parts.size() < minParts)
    parts.emplace_back();
  return parts;
}

/// A scratch directory private to this process, removed (with the files
/// written through it) at exit.
class ScratchDir {
public:
  /// The process-wide instance (never destroyed: the atexit handler that
  /// removes the directory runs after static destructors).
  static ScratchDir &get() {
    static ScratchDir *dir = new ScratchDir();
    return *dir;
  }

  const std::string &path() const { return path_; }

  /// Path of `name` inside the directory.
  std::string file(const std::string &name) const { return path_ + "/" + name; }

  /// Writes `bytes` to `name` (replacing it); returns its path. Aborts on an
  /// I/O error: that is the harness failing, not the code under test.
  std::string write(const std::string &name, std::string_view bytes) {
    std::string p = file(name);
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0)
      die("cannot create", p);
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0)
        die("cannot write", p);
      done += size_t(n);
    }
    ::close(fd);
    remember(name);
    return p;
  }

  /// Creates `name` as a sparse file of `size` zero bytes.
  std::string writeZeros(const std::string &name, uint64_t size) {
    std::string p = write(name, {});
    if (::truncate(p.c_str(), off_t(size)) != 0)
      die("cannot extend", p);
    return p;
  }

  /// Removes every file written so far (call at the start of each input so
  /// that nothing from the previous one is seen).
  void clear() {
    for (const std::string &n : names_)
      ::unlink(file(n).c_str());
  }

private:
  ScratchDir() {
    const char *base = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : nullptr;
    if (!base)
      base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
    std::string tmpl = std::string(base) + "/kiln-fuzz-XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data()))
      die("cannot create a scratch directory in", base);
    path_ = buf.data();
    std::atexit([] {
      ScratchDir &d = get();
      d.clear();
      ::rmdir(d.path_.c_str());
    });
  }

  void remember(const std::string &name) {
    for (const std::string &n : names_)
      if (n == name)
        return;
    names_.push_back(name);
  }

  [[noreturn]] static void die(const char *what, const std::string &p) {
    std::fprintf(stderr, "kiln fuzz harness: %s %s\n", what, p.c_str());
    std::abort();
  }

  std::string path_;
  std::vector<std::string> names_;
};

} // namespace kiln::fuzz

#endif // KILN_TEST_FUZZ_FUZZUTILS_H
