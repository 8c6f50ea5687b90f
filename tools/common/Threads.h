//===- Threads.h - --threads N of the tools that run artifacts --*- C++ -*-===//
#ifndef KILN_TOOLS_COMMON_THREADS_H
#define KILN_TOOLS_COMMON_THREADS_H

#include "llvm/Support/CommandLine.h"

#include <cstdint>
#include <string>

namespace kiln::tool {

/// The tool's --threads N option, in `category`. Call before the tool hides
/// unrelated options and parses its command line. libLLVM registers an
/// unrelated option of the same name (no Kiln tool uses it); it is
/// unregistered first, so `--threads` is Kiln's.
llvm::cl::opt<int64_t> &threadsOption(llvm::cl::OptionCategory &category);

/// Applies --threads: `given` false keeps OMP_NUM_THREADS when the
/// environment sets it and otherwise uses the physical cores
/// (kiln_rt_default_threads); `given` true requires 1 <= n <= 4096. On a bad
/// value prints `<tool>: error: --threads ...` and exits 1. Returns the
/// thread count the steps will use.
int applyThreads(int64_t n, bool given);

} // namespace kiln::tool

#endif // KILN_TOOLS_COMMON_THREADS_H
