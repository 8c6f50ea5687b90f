//===- LibraryPath.h - Where libkiln_runtime.so lives -------------*- C++ -*-===//
//
// The optional backend libraries (libkiln_runtime_cuda.so, the CUDA
// executor; libkiln_comm_mpi.so, the MPI communicator) are installed beside
// libkiln_runtime.so and dlopen()ed from there on first use.
//
//===----------------------------------------------------------------------===//
#ifndef KILN_RUNTIME_BASE_LIBRARYPATH_H
#define KILN_RUNTIME_BASE_LIBRARYPATH_H

#include "kiln_rt/api.h"

#include <dlfcn.h>

#include <string>

namespace kiln::rt {

/// Directory of libkiln_runtime.so itself ("." if dladdr cannot tell).
inline std::string runtimeDirectory() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&kiln_rt_artifact_open), &info) == 0 ||
      !info.dli_fname)
    return ".";
  std::string path = info.dli_fname;
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? "." : path.substr(0, slash);
}

} // namespace kiln::rt

#endif // KILN_RUNTIME_BASE_LIBRARYPATH_H
