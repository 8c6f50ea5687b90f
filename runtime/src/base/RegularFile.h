//===- RegularFile.h - Bounded reads of regular files -----------*- C++ -*-===//
//
// The runtime side's one way to read a whole small file that a user names
// (tokenizer.json, key files, kiln-run's --prompt-file and --chat-template):
// opened without blocking and checked with fstat before anything is read, so
// a FIFO, a device or a directory is an error instead of a hang, an endless
// read or silently empty contents, and a file over the caller's limit is
// refused before it is loaded. Plain C++17 and POSIX (no LLVM).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_SRC_BASE_REGULARFILE_H
#define KILN_RUNTIME_SRC_BASE_REGULARFILE_H

#include <cstdint>
#include <string>

#include <sys/types.h>

namespace kiln::rt {

/// Reads all of the regular file `path` into `out`. `what` names the file's
/// role in messages ("a tokenizer.json", "a key file"). Returns false with
/// `error` set to "<path>: <reason>" when it cannot be opened, is not a
/// regular file ("is a directory, expected a key file", also FIFOs, sockets,
/// devices), has more than `maxBytes` bytes ("N bytes, more than the M
/// bytes a key file may have"), or cannot be read whole. `mode`, if given,
/// receives the file's st_mode.
bool readRegularFile(const std::string &path, uint64_t maxBytes,
                     const std::string &what, std::string &out,
                     std::string &error, mode_t *mode = nullptr);

/// Reads standard input until its end, at most `maxBytes` bytes: false with
/// `error` set when there are more or on a read error.
bool readBoundedStdin(uint64_t maxBytes, std::string &out, std::string &error);

} // namespace kiln::rt

#endif // KILN_RUNTIME_SRC_BASE_REGULARFILE_H
