//===- FuzzReplayMain.cpp - Runs fuzz inputs without libFuzzer ------------===//
//
// The main() of the fuzz targets in builds without KILN_ENABLE_FUZZERS (any
// compiler): runs LLVMFuzzerTestOneInput once on every file named on the
// command line (directories: every file in them), so regression inputs are
// replayed by the ordinary test run. Arguments starting with '-' (libFuzzer
// flags such as -runs=0) are ignored, so one command line serves both kinds
// of binary.
//
//===----------------------------------------------------------------------===//

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include <dirent.h>
#include <sys/stat.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int *argc,
                                                          char ***argv);

static bool runFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "%s: cannot open\n", path.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::fprintf(stderr, "Running: %s (%zu bytes)\n", path.c_str(), bytes.size());
  // A copy in its own allocation, as libFuzzer does, so sanitizers see
  // reads past the end.
  std::vector<uint8_t> copy(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
  return true;
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize)
    LLVMFuzzerInitialize(&argc, &argv);
  bool ok = true;
  int ran = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (!arg.empty() && arg[0] == '-')
      continue;
    struct stat st;
    if (::stat(arg.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::vector<std::string> files;
      if (DIR *d = ::opendir(arg.c_str())) {
        while (dirent *e = ::readdir(d))
          if (e->d_name[0] != '.')
            files.push_back(arg + "/" + e->d_name);
        ::closedir(d);
      }
      for (const std::string &f : files)
        ok &= runFile(f), ++ran;
      continue;
    }
    ok &= runFile(arg);
    ++ran;
  }
  std::fprintf(stderr, "replayed %d inputs\n", ran);
  return ok ? 0 : 1;
}
