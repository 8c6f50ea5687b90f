//===- Threads.cpp - How many threads the CPU kernels use -------*- C++ -*-===//
//
// api.h kiln_rt_set_threads / kiln_rt_threads / kiln_rt_default_threads.
// The CPU kernels parallelise over the runtime's persistent thread pool
// (ThreadPool.h); the count is the pool's, process-wide. The default is the
// number of physical cores the process may run on (SMT siblings count
// once: two threads on one core's shared FMA units and caches slow the
// memory-bound decode down), read from Linux sysfs topology for the CPUs of
// the affinity mask.
//
//===----------------------------------------------------------------------===//
#include "cpu/Kernels.h"
#include "cpu/ThreadPool.h"
#include "kiln_rt/api.h"

#include <omp.h>
#include <sched.h>

#include <cstdio>
#include <set>
#include <string>
#include <utility>

namespace {

/// Reads one integer from a sysfs file; -1 when it cannot.
long readSysfsLong(const std::string &path) {
  std::FILE *f = std::fopen(path.c_str(), "r");
  if (!f)
    return -1;
  long v = -1;
  if (std::fscanf(f, "%ld", &v) != 1)
    v = -1;
  std::fclose(f);
  return v;
}

} // namespace

extern "C" int kiln_rt_default_threads(void) {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
    return omp_get_num_procs() > 0 ? omp_get_num_procs() : 1;
  std::set<std::pair<long, long>> cores;
  int cpus = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &mask))
      continue;
    ++cpus;
    std::string base =
        "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    long package = readSysfsLong(base + "physical_package_id");
    long core = readSysfsLong(base + "core_id");
    if (package < 0 || core < 0)
      return cpus > 0 ? CPU_COUNT(&mask) : 1; // no topology: every CPU
    cores.emplace(package, core);
  }
  return cores.empty() ? 1 : int(cores.size());
}

extern "C" int kiln_rt_cpu_amx(void) {
  return kiln::rt::cpu::amxAvailable() ? 1 : 0;
}

extern "C" int kiln_rt_threads(void) {
  return kiln::rt::cpu::poolThreads();
}
