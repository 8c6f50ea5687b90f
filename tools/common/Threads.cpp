//===- Threads.cpp - --threads N of the tools that run artifacts ----------===//

#include "tools/common/Threads.h"
#include "tools/common/ToolSupport.h"

#include "kiln_rt/api.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace kiln::tool {

llvm::cl::opt<int64_t> &threadsOption(llvm::cl::OptionCategory &category) {
  static llvm::cl::opt<int64_t> *option = [&] {
    if (llvm::cl::Option *other =
            llvm::cl::getRegisteredOptions().lookup("threads"))
      other->removeArgument();
    return new llvm::cl::opt<int64_t>(
        "threads",
        llvm::cl::desc("Threads of the CPU kernels (default: the physical "
                       "cores, or OMP_NUM_THREADS when set); results are "
                       "identical for any count"),
        llvm::cl::value_desc("N"), llvm::cl::cat(category));
  }();
  return *option;
}

int applyThreads(int64_t n, bool given) {
  if (given && (n < 1 || n > 4096)) {
    std::fprintf(stderr,
                 "%s: error: --threads must be in [1, 4096], got %lld (the "
                 "default is the %d physical cores of this machine)\n",
                 toolName().str().c_str(), (long long)n,
                 kiln_rt_default_threads());
    std::exit(1);
  }
  if (!given) {
    const char *env = std::getenv("OMP_NUM_THREADS");
    if (env && *env)
      return kiln_rt_threads(); // the environment's choice stands
    n = 0;                      // physical cores
    // Ranks of an mpirun job on one node share its cores: each takes its
    // share (mpirun's core binding already narrows the affinity mask, and
    // then the share is that mask's cores).
    const char *local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    const int ranks = local ? std::atoi(local) : 0;
    if (ranks > 1)
      n = std::max(1, kiln_rt_default_threads() / ranks);
  }
  if (kiln_rt_status_t s = kiln_rt_set_threads(int(n))) {
    std::fprintf(stderr, "%s: error: --threads: %s\n", toolName().str().c_str(),
                 kiln_rt_status_message(s));
    kiln_rt_status_free(s);
    std::exit(1);
  }
  return kiln_rt_threads();
}

} // namespace kiln::tool
