//===- SafeOutput.h - temporary directories and atomic replacement -*- C++ -*-===//
//
// What kiln-compile and kiln-calibrate need so that an output is either
// produced whole or not at all, and nothing Kiln made is left behind
// (docs/artifact.md, "Writing an artifact safely"):
//
//  - ScratchDir: a directory with an unpredictable mkdtemp(3) name, created
//    exclusively (never through a symbolic link), locked with flock(2) while
//    it lives and removed with its contents when it goes out of scope, when
//    the process gets SIGINT, SIGTERM or SIGHUP, when it crashes and when it
//    calls exit();
//  - a process-wide cleanup registry behind those guarantees, which also
//    stops registered child processes (the host compiler) on a signal;
//  - moveDirectoryIntoPlace: rename a finished directory over the target
//    atomically (renameat2 RENAME_EXCHANGE / RENAME_NOREPLACE);
//  - removeStaleScratchDirs: find what a killed (SIGKILL, power loss) run
//    left, remove what is provably Kiln's and unused, report the rest.
//
// Linux/POSIX only, like the rest of Kiln; only LLVM Support is used.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_ARTIFACT_SAFEOUTPUT_H
#define KILN_CODEGEN_ARTIFACT_SAFEOUTPUT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <csignal>
#include <string>
#include <sys/types.h>
#include <vector>

namespace mlir::kiln {

/// Name of the (empty) file every ScratchDir holds; a directory without it
/// is never removed by removeStaleScratchDirs unless it is empty.
inline constexpr const char *kScratchMarker = ".kiln-scratch";

/// Removes `path` and, if it is a directory, everything below it. Symbolic
/// links are removed, never followed, at every level, so nothing outside
/// `path` is touched. Async-signal-safe (openat/getdents64/unlinkat, no
/// allocation). Returns 0, or the errno of the first failure; a missing
/// `path` is success.
int removeTree(const char *path);

/// Process-wide list of what to undo if the process dies: directories to
/// remove, renames to revert and child processes to stop. Registering the
/// first entry installs the handlers (once): SIGINT, SIGTERM and SIGHUP run
/// the cleanup and then the previous disposition of the signal (LLVM's
/// handler, then the default, so the exit status still reports the
/// signal); crash signals run it through llvm::sys::AddSignalHandler; exit()
/// runs it through atexit. An interrupt signal that lands on another thread
/// is passed on to the thread that installed the handlers (the one that
/// registers and writes the output, normally the main thread), so the
/// cleanup never races with that thread's own steps. Registration allocates
/// and is not signal-safe; the cleanup itself is.
namespace cleanup {
/// Removes the directory tree at `path` on abnormal exit. Returns a handle
/// for forget(), or -1 if the registry is full (then nothing is done on a
/// signal, but normal cleanup still works).
int addTree(llvm::StringRef path);
/// On abnormal exit renames `from` back to `to` (before removing trees), if
/// `from` still exists and `to` does not.
int addRestore(llvm::StringRef from, llvm::StringRef to);
/// Sends the signal (SIGTERM for crashes and exit) to the process group of
/// child `pid` (which leads its own group, see runProcess) on abnormal exit
/// and reaps it, with SIGKILL after about two seconds.
int addChild(pid_t pid);
/// Drops the entry `handle` (from addTree, addRestore or addChild); -1 is
/// ignored.
void forget(int handle);
/// Runs the cleanup now, as a signal would (for tests). `signal` is what
/// children get.
void runForTest(int signal);
/// While an object of this type lives, SIGINT, SIGTERM and SIGHUP are held
/// pending for the calling thread, so a short step (starting a child and
/// registering it) cannot be cut in half; they are delivered at its end.
class DeferSignals {
public:
  DeferSignals();
  ~DeferSignals();
  DeferSignals(const DeferSignals &) = delete;
  DeferSignals &operator=(const DeferSignals &) = delete;

private:
  sigset_t previous;
};
} // namespace cleanup

/// Runs `argv` (argv[0] is the program's path) with stdin from /dev/null and
/// stdout and stderr appended to `logPath`, in a process group of its own
/// that is registered with the cleanup registry until it ends, so a
/// SIGINT/SIGTERM/SIGHUP to Kiln stops it and everything it started (a
/// compiler driver's cc1plus and as). A non-empty `tmpDir` becomes its
/// TMPDIR, so its temporary files (gcc's, nvcc's) land in a directory Kiln
/// removes even when the signal gives the program no chance to. Returns its
/// exit status, or minus the signal that killed it; an error if it could not
/// be started.
llvm::Expected<int> runProcess(llvm::ArrayRef<llvm::StringRef> argv,
                               llvm::StringRef logPath,
                               llvm::StringRef tmpDir = "");

/// A private directory `<parent>/<prefix>XXXXXX` (mkdtemp), holding
/// kScratchMarker, locked (flock LOCK_EX on the directory) and registered
/// with the cleanup registry for as long as the object lives; the destructor
/// removes it and all it holds (removeTree).
class ScratchDir {
public:
  /// Creates the directory; `parent` must exist. Errors name the path.
  static llvm::Expected<ScratchDir> create(llvm::StringRef parent,
                                           llvm::StringRef prefix);
  ScratchDir(ScratchDir &&other);
  ScratchDir &operator=(ScratchDir &&) = delete;
  ScratchDir(const ScratchDir &) = delete;
  ~ScratchDir();

  /// The directory's absolute path.
  llvm::StringRef path() const { return dirPath; }
  /// `path()/name`.
  std::string child(llvm::StringRef name) const;
  /// Removes the directory now; later calls and the destructor do nothing.
  llvm::Error remove();

private:
  ScratchDir() = default;
  std::string dirPath;
  int lockFd = -1;
  int handle = -1;
};

/// `path` without trailing slashes ("out.kiln/" -> "out.kiln"; "/" stays).
std::string stripTrailingSlashes(llvm::StringRef path);

/// What an output path names once symbolic links are accounted for.
struct ResolvedOutput {
  std::string path;       ///< where to write (no trailing slash)
  std::string symlinkVia; ///< the -o path, when it was a symbolic link
};

/// Resolves an output path the way kiln-compile's and kiln-calibrate's -o
/// do: trailing slashes are dropped; a final component that is a symbolic
/// link is followed (all links resolved, fs::real_path), so the output
/// replaces what the link points to and the link is kept. Errors: an empty
/// path, a final "." or "..", a dangling link.
llvm::Expected<ResolvedOutput> resolveOutputPath(llvm::StringRef path);

/// Where a single-file output (`-o FILE` of kiln-calibrate and of
/// kiln-compile --emit) goes, once checked by checkFileOutput.
struct FileOutputTarget {
  enum Kind {
    Stdout, ///< "-"
    Device, ///< a character device (/dev/null, a terminal): written in place
    File,   ///< a regular file, or nothing yet: replaced via a temporary file
  };
  Kind kind = File;
  std::string path; ///< the final target (symbolic links followed)
  std::string via;  ///< " (where the symbolic link L points)" or ""
};

/// Classifies a single-file output path: "-" is stdout; symbolic links are
/// followed to their final target (fs::real_path; a dangling link is an
/// error); a character device is written in place; a regular file or a
/// missing name is replaced atomically. A directory, named pipe (FIFO),
/// socket or block device is refused with one line naming the path and
/// what it is.
llvm::Expected<FileOutputTarget> checkFileOutput(llvm::StringRef path);

/// Refuses a single-file output `path` that would overwrite one of the
/// tool's inputs: `inputs` are (flag, path) pairs, e.g. {"MODEL", m},
/// {"--tokenizer", t}; an input that is a directory (a Hugging Face
/// checkpoint) is hit by any existing file inside it. "-" and names that do
/// not exist yet are fine. Error: "-o OUT is the input file IN (FLAG);
/// writing it would destroy the input" (like gcc's "input file is the same
/// as output file"); `outputFlag` names the output's flag ("-o",
/// "--trace").
llvm::Error checkOutputIsNotAnInput(
    llvm::StringRef path,
    llvm::ArrayRef<std::pair<llvm::StringRef, llvm::StringRef>> inputs,
    llvm::StringRef outputFlag = "-o");

/// Writes a single-file output: checkFileOutput(`path`), then `write` gets
/// a stream to stdout, to the device (opened O_WRONLY, never replaced or
/// removed) or to a temporary file `<name>.kiln-tmp-XXXXXX` beside the
/// target, which is renamed over the target only if `write` succeeds (the
/// target keeps a replaced file's permissions). The temporary file is
/// removed on failure, on SIGINT/SIGTERM/SIGHUP and on a crash (cleanup
/// registry). An error from `write` is returned as is; other errors name
/// the path.
llvm::Error
writeFileOutput(llvm::StringRef path,
                llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write);

/// Moves the directory `from` to `to` on the same file system.
///  - `to` absent: renameat2(RENAME_NOREPLACE), else rename(2) (which
///    never replaces a non-empty directory).
///  - `to` a directory: renameat2(RENAME_EXCHANGE), so `to` names the old
///    or the new directory at every instant, and the old one ends up at
///    `from` for the caller to remove. Where the file system lacks
///    RENAME_EXCHANGE (or `allowExchange` is false, for tests): the old
///    directory is renamed to `oldParking` (which must not exist, on the
///    same file system), the new one to `to`, and the old one is renamed
///    back if that fails or the process is killed in between (a registered
///    restore); `to` is missing for that instant only.
/// Returns the path where the old directory now is ("" if there was none).
llvm::Expected<std::string> moveDirectoryIntoPlace(llvm::StringRef from,
                                                   llvm::StringRef to,
                                                   llvm::StringRef oldParking,
                                                   bool allowExchange = true);

/// Looks in `parent` for entries whose name starts with `prefix` (the
/// ScratchDirs of killed runs). Removes each that is a real directory (not
/// a link) owned by this user, holds kScratchMarker (or nothing) and is not
/// locked by a running process; leaves the others alone. Returns one line
/// per entry found, saying which it was.
std::vector<std::string> removeStaleScratchDirs(llvm::StringRef parent,
                                                llvm::StringRef prefix);

} // namespace mlir::kiln

#endif // KILN_CODEGEN_ARTIFACT_SAFEOUTPUT_H
