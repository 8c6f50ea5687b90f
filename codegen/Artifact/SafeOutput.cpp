//===- SafeOutput.cpp - temporary directories and atomic replacement ------===//
//
// The cleanup registry is a fixed array of atomic pointers, so the signal
// handler only reads what registration published completely and never
// allocates; everything it calls (kill, waitpid, nanosleep, rename,
// openat, getdents64, unlinkat, sigaction, raise) is async-signal-safe.
//
//===----------------------------------------------------------------------===//

#include "codegen/Artifact/SafeOutput.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Signals.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <mutex>
#include <pthread.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

using namespace mlir::kiln;
namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

static llvm::Error errnoError(int err, const llvm::Twine &what) {
  std::error_code ec(err, std::generic_category());
  return llvm::createStringError(ec, what + ": " + ec.message());
}

//===----------------------------------------------------------------------===//
// removeTree
//===----------------------------------------------------------------------===//

/// Deeper than any directory Kiln writes; bounds the handler's stack use
/// (one getdents buffer per level).
static constexpr int kMaxTreeDepth = 16;

/// Removes `name` (relative to the directory `dirFd`) and what it holds.
static int removeAt(int dirFd, const char *name, int depth) {
  // A file or a link goes at once; unlink(2) refuses directories with
  // EISDIR (Linux) or EPERM (POSIX).
  if (::unlinkat(dirFd, name, 0) == 0 || errno == ENOENT)
    return 0;
  if (errno != EISDIR && errno != EPERM)
    return errno;
  if (depth >= kMaxTreeDepth)
    return ELOOP;
  int fd = ::openat(dirFd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0)
    return errno == ENOENT ? 0 : errno;
  int firstError = 0;
  // Entries removed while reading may shift the rest, so read again from the
  // start until a pass finds nothing (or an entry cannot be removed).
  for (int pass = 0; pass < 64 && !firstError; ++pass) {
    bool sawEntry = false;
    if (::lseek(fd, 0, SEEK_SET) != 0) {
      firstError = errno;
      break;
    }
    alignas(8) char buffer[1024];
    for (;;) {
      long n = ::syscall(SYS_getdents64, fd, buffer, sizeof(buffer));
      if (n <= 0) {
        if (n < 0 && !firstError)
          firstError = errno;
        break;
      }
      for (long offset = 0; offset < n;) {
        const auto *entry =
            reinterpret_cast<const struct dirent64 *>(buffer + offset);
        offset += entry->d_reclen;
        const char *child = entry->d_name;
        if (std::strcmp(child, ".") == 0 || std::strcmp(child, "..") == 0)
          continue;
        sawEntry = true;
        if (int err = removeAt(fd, child, depth + 1); err && !firstError)
          firstError = err;
      }
    }
    if (!sawEntry)
      break;
  }
  ::close(fd);
  if (::unlinkat(dirFd, name, AT_REMOVEDIR) != 0 && errno != ENOENT)
    return firstError ? firstError : errno;
  return 0;
}

int mlir::kiln::removeTree(const char *treePath) {
  int saved = errno;
  int err = removeAt(AT_FDCWD, treePath, 0);
  errno = saved;
  return err;
}

//===----------------------------------------------------------------------===//
// Cleanup registry
//===----------------------------------------------------------------------===//

namespace {
enum class EntryKind { Tree, Restore, Child };
/// One registered action. Published whole through an atomic pointer and
/// never modified afterwards.
struct Entry {
  EntryKind kind;
  char *first = nullptr;  ///< tree to remove / rename source
  char *second = nullptr; ///< rename destination
  pid_t pid = 0;
};
constexpr int kSlots = 64;
std::atomic<Entry *> slots[kSlots];
/// Set while a cleanup runs, so a nested signal does not start another.
std::atomic<bool> cleaning{false};
constexpr int kInterruptSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction previousActions[NSIG];
/// The thread that installed the handlers; interrupt signals are handled
/// there.
std::atomic<pid_t> ownerThread{0};
/// The interrupt signals the process inherited as ignored (a background job
/// of a non-interactive shell, nohup, a test runner), recorded before main()
/// and before LLVM installs its handlers over them: those stay ignored, so
/// the output is not removed under a process that goes on running.
struct InheritedDispositions {
  bool ignored[NSIG] = {};
  InheritedDispositions() {
    for (int sig : kInterruptSignals) {
      struct sigaction current;
      ignored[sig] = ::sigaction(sig, nullptr, &current) == 0 &&
                     current.sa_handler == SIG_IGN;
    }
  }
};
InheritedDispositions inherited;
} // namespace

static void freeEntry(Entry *entry) {
  std::free(entry->first);
  std::free(entry->second);
  delete entry;
}

/// Stops the process group led by `pid` with `sig` and reaps the leader,
/// escalating to SIGKILL after about two seconds so a compiler that ignores
/// the signal cannot hang the exit; then gives the rest of the group (a
/// driver's cc1plus, as) a moment to go.
static void stopChild(pid_t pid, int sig) {
  if (::kill(-pid, sig) != 0 && ::kill(pid, sig) != 0)
    return;
  struct timespec tick = {0, 10 * 1000 * 1000};
  bool reaped = false;
  for (int i = 0; i < 200 && !reaped; ++i) {
    pid_t r = ::waitpid(pid, nullptr, WNOHANG);
    if (r == pid || (r < 0 && errno != EINTR))
      reaped = true;
    else
      ::nanosleep(&tick, nullptr);
  }
  if (!reaped) {
    ::kill(-pid, SIGKILL);
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  for (int i = 0; i < 50 && ::kill(-pid, 0) == 0; ++i)
    ::nanosleep(&tick, nullptr);
}

/// Takes every entry out of the registry and performs it: children first
/// (so they stop writing), then renames back, then tree removal. Returns
/// the entries taken (to be freed outside a signal handler, or leaked).
static int runCleanup(int childSignal, Entry **taken) {
  int count = 0;
  for (auto &slot : slots)
    if (Entry *entry = slot.exchange(nullptr))
      taken[count++] = entry;
  for (int i = 0; i < count; ++i)
    if (taken[i]->kind == EntryKind::Child)
      stopChild(taken[i]->pid, childSignal);
  for (int i = 0; i < count; ++i)
    if (taken[i]->kind == EntryKind::Restore) {
      struct stat st;
      if (::lstat(taken[i]->second, &st) != 0 && errno == ENOENT)
        ::rename(taken[i]->first, taken[i]->second);
    }
  for (int i = 0; i < count; ++i)
    if (taken[i]->kind == EntryKind::Tree)
      // Another thread may still be creating files in the tree; retry.
      for (int attempt = 0; attempt < 4 && removeTree(taken[i]->first) != 0;
           ++attempt) {
      }
  return count;
}

static void cleanupOnce(int childSignal) {
  bool expected = false;
  if (!cleaning.compare_exchange_strong(expected, true))
    return;
  Entry *taken[kSlots];
  runCleanup(childSignal, taken);
  cleaning.store(false);
}

/// SIGINT, SIGTERM, SIGHUP: clean up, then let the signal take its previous
/// course (LLVM's handler, which removes its own files and re-raises with
/// the default action), so the process still dies of the signal.
static void onInterruptSignal(int sig) {
  int savedErrno = errno;
  pid_t owner = ownerThread.load();
  if (owner != 0 && owner != static_cast<pid_t>(::syscall(SYS_gettid)) &&
      ::syscall(SYS_tgkill, ::getpid(), owner, sig) == 0) {
    errno = savedErrno;
    return; // handled on the owner thread, in step with its work
  }
  cleanupOnce(sig);
  ::sigaction(sig, &previousActions[sig], nullptr);
  // Blocked while this handler runs: delivered as soon as it returns.
  ::raise(sig);
  errno = savedErrno;
}

/// Crash signals (through LLVM's handler) and exit().
static void onCrash(void *) { cleanupOnce(SIGTERM); }
static void onExit() { cleanupOnce(SIGTERM); }

static void installHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    ownerThread.store(static_cast<pid_t>(::syscall(SYS_gettid)));
    // Registers LLVM's handlers first (if InitLLVM did not), so ours sit on
    // top of them and run first.
    llvm::sys::AddSignalHandler(onCrash, nullptr);
    std::atexit(onExit);
    struct sigaction action;
    std::memset(&action, 0, sizeof(action));
    action.sa_handler = onInterruptSignal;
    sigemptyset(&action.sa_mask);
    for (int sig : kInterruptSignals)
      sigaddset(&action.sa_mask, sig);
    for (int sig : kInterruptSignals) {
      struct sigaction current;
      if (inherited.ignored[sig] || ::sigaction(sig, nullptr, &current) != 0 ||
          current.sa_handler == SIG_IGN)
        continue; // e.g. SIGHUP under nohup: keep ignoring it
      ::sigaction(sig, &action, &previousActions[sig]);
    }
  });
}

static int publish(Entry *entry) {
  installHandlers();
  for (int i = 0; i < kSlots; ++i) {
    Entry *expected = nullptr;
    if (slots[i].compare_exchange_strong(expected, entry))
      return i;
  }
  freeEntry(entry);
  return -1;
}

static char *absoluteCopy(llvm::StringRef p) {
  llvm::SmallString<256> abs(p);
  fs::make_absolute(abs);
  return ::strdup(abs.c_str());
}

int cleanup::addTree(llvm::StringRef treePath) {
  return publish(new Entry{EntryKind::Tree, absoluteCopy(treePath)});
}

int cleanup::addRestore(llvm::StringRef from, llvm::StringRef to) {
  return publish(
      new Entry{EntryKind::Restore, absoluteCopy(from), absoluteCopy(to)});
}

int cleanup::addChild(pid_t pid) {
  return publish(new Entry{EntryKind::Child, nullptr, nullptr, pid});
}

void cleanup::forget(int handle) {
  if (handle < 0 || handle >= kSlots)
    return;
  if (Entry *entry = slots[handle].exchange(nullptr))
    freeEntry(entry);
}

cleanup::DeferSignals::DeferSignals() {
  sigset_t held;
  sigemptyset(&held);
  for (int sig : kInterruptSignals)
    sigaddset(&held, sig);
  ::pthread_sigmask(SIG_BLOCK, &held, &previous);
}

cleanup::DeferSignals::~DeferSignals() {
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

void cleanup::runForTest(int signal) {
  Entry *taken[kSlots];
  int count = runCleanup(signal, taken);
  for (int i = 0; i < count; ++i)
    freeEntry(taken[i]);
}

//===----------------------------------------------------------------------===//
// Child processes
//===----------------------------------------------------------------------===//

llvm::Expected<int> mlir::kiln::runProcess(llvm::ArrayRef<llvm::StringRef> argv,
                                           llvm::StringRef logPath,
                                           llvm::StringRef tmpDir) {
  if (argv.empty())
    return llvm::createStringError("no program to run");
  std::vector<std::string> storage(argv.begin(), argv.end());
  std::vector<char *> args;
  for (std::string &arg : storage)
    args.push_back(arg.data());
  args.push_back(nullptr);
  std::string log = logPath.str();
  std::vector<std::string> envStorage;
  for (char **e = environ; *e; ++e)
    if (tmpDir.empty() || !llvm::StringRef(*e).starts_with("TMPDIR="))
      envStorage.push_back(*e);
  if (!tmpDir.empty())
    envStorage.push_back(("TMPDIR=" + tmpDir).str());
  std::vector<char *> envp;
  for (std::string &entry : envStorage)
    envp.push_back(entry.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(),
                                   O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW,
                                   0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  // Its own process group, so stopping it reaches what it starts; the
  // child gets the signal mask and dispositions Kiln had before.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : kInterruptSignals)
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);

  pid_t pid = 0;
  int spawnError = 0;
  int handle = -1;
  {
    // A signal between the spawn and the registration would orphan the
    // child: hold it until both are done.
    installHandlers();
    cleanup::DeferSignals defer;
    sigset_t childMask;
    ::pthread_sigmask(SIG_SETMASK, nullptr, &childMask);
    for (int sig : kInterruptSignals)
      sigdelset(&childMask, sig);
    posix_spawnattr_setsigmask(&attr, &childMask);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP |
                                        POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    spawnError = ::posix_spawn(&pid, args[0], &actions, &attr, args.data(),
                               envp.data());
    if (spawnError == 0)
      handle = cleanup::addChild(pid);
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (spawnError != 0)
    return errnoError(spawnError, "cannot run " + argv[0]);

  int status = 0;
  pid_t r;
  do
    r = ::waitpid(pid, &status, 0);
  while (r < 0 && errno == EINTR);
  int waitError = errno;
  cleanup::forget(handle);
  if (r < 0)
    return errnoError(waitError, "cannot wait for " + argv[0]);
  if (WIFSIGNALED(status))
    return -WTERMSIG(status);
  return WEXITSTATUS(status);
}

//===----------------------------------------------------------------------===//
// ScratchDir
//===----------------------------------------------------------------------===//

llvm::Expected<ScratchDir> ScratchDir::create(llvm::StringRef parent,
                                              llvm::StringRef prefix) {
  llvm::SmallString<256> pattern(parent.empty() ? "." : parent);
  if (std::error_code ec = fs::make_absolute(pattern))
    return llvm::createStringError(ec, "cannot resolve " + parent + ": " +
                                           ec.message());
  path::append(pattern, prefix + "XXXXXX");
  // mkdtemp: unpredictable name, created with mkdir(2), which fails rather
  // than follow anything already there; mode 0700.
  (void)pattern.c_str(); // NUL-terminates the buffer mkdtemp edits in place
  if (!::mkdtemp(pattern.data()))
    return errnoError(errno, "cannot create a temporary directory in " +
                                 (parent.empty() ? llvm::StringRef(".") : parent));
  ScratchDir dir;
  dir.dirPath = std::string(pattern.str());
  dir.handle = cleanup::addTree(dir.dirPath);
  // The lock tells removeStaleScratchDirs that this directory is alive; the
  // kernel drops it when the process dies, however it dies.
  dir.lockFd = ::open(dir.dirPath.c_str(),
                      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir.lockFd < 0 || ::flock(dir.lockFd, LOCK_EX | LOCK_NB) != 0)
    return errnoError(errno, "cannot lock " + dir.dirPath);
  int marker = ::openat(dir.lockFd, kScratchMarker,
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        0600);
  if (marker < 0)
    return errnoError(errno, "cannot write " + dir.child(kScratchMarker));
  ::close(marker);
  return std::move(dir);
}

ScratchDir::ScratchDir(ScratchDir &&other)
    : dirPath(std::move(other.dirPath)), lockFd(other.lockFd),
      handle(other.handle) {
  other.dirPath.clear();
  other.lockFd = -1;
  other.handle = -1;
}

ScratchDir::~ScratchDir() { llvm::consumeError(remove()); }

std::string ScratchDir::child(llvm::StringRef name) const {
  llvm::SmallString<256> p(dirPath);
  path::append(p, name);
  return std::string(p.str());
}

llvm::Error ScratchDir::remove() {
  if (dirPath.empty())
    return llvm::Error::success();
  int err = removeTree(dirPath.c_str());
  if (lockFd >= 0)
    ::close(lockFd);
  cleanup::forget(handle);
  std::string removed = std::move(dirPath);
  dirPath.clear();
  lockFd = -1;
  handle = -1;
  if (err)
    return errnoError(err, "cannot remove " + removed);
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Output paths and replacement
//===----------------------------------------------------------------------===//

std::string mlir::kiln::stripTrailingSlashes(llvm::StringRef p) {
  while (p.size() > 1 && p.ends_with("/"))
    p = p.drop_back();
  return p.str();
}

llvm::Expected<ResolvedOutput>
mlir::kiln::resolveOutputPath(llvm::StringRef outPath) {
  if (outPath.empty())
    return llvm::createStringError("the output path is empty");
  std::string p = stripTrailingSlashes(outPath);
  llvm::StringRef name = path::filename(p);
  if (p == "/" || name == "." || name == "..")
    return llvm::createStringError(
        outPath + ": name the output itself (e.g. out.kiln), not a "
                  "directory to put it in");
  struct stat st;
  if (::lstat(p.c_str(), &st) != 0 || !S_ISLNK(st.st_mode))
    return ResolvedOutput{p, ""};
  llvm::SmallString<256> real;
  if (std::error_code ec = fs::real_path(p, real)) {
    char target[4096];
    ssize_t n = ::readlink(p.c_str(), target, sizeof(target) - 1);
    std::string shown = n > 0 ? std::string(target, n) : std::string("?");
    return llvm::createStringError(
        ec, p + " is a symbolic link to '" + shown +
                "', which cannot be resolved (" + ec.message() +
                "); point it at a directory or remove it");
  }
  return ResolvedOutput{std::string(real.str()), p};
}

/// What `mode` names, for the refusals of checkFileOutput.
static const char *fileKindName(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISFIFO(mode))
    return "a named pipe (FIFO)";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISBLK(mode))
    return "a block device";
  return "not a regular file";
}

llvm::Expected<FileOutputTarget>
mlir::kiln::checkFileOutput(llvm::StringRef outPath) {
  FileOutputTarget target;
  if (outPath == "-") {
    target.kind = FileOutputTarget::Stdout;
    target.path = "-";
    return target;
  }
  if (outPath.empty())
    return llvm::createStringError("the output path is empty");
  target.path = outPath.str();
  struct stat st;
  if (::lstat(target.path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      return target; // a new file
    return errnoError(errno, "cannot inspect " + target.path);
  }
  if (S_ISLNK(st.st_mode)) {
    llvm::SmallString<256> real;
    if (std::error_code ec = fs::real_path(target.path, real))
      return llvm::createStringError(
          ec, target.path + " is a symbolic link that cannot be resolved (" +
                  ec.message() + "); point it at a file or remove it");
    target.via = " (where the symbolic link " + target.path + " points)";
    target.path = std::string(real.str());
    if (::stat(target.path.c_str(), &st) != 0)
      return errnoError(errno, "cannot inspect " + target.path + target.via);
  }
  if (S_ISCHR(st.st_mode))
    target.kind = FileOutputTarget::Device;
  else if (!S_ISREG(st.st_mode))
    return llvm::createStringError(
        target.path + target.via + " is " + fileKindName(st.st_mode) +
        "; -o writes a regular file (replaced whole) or a character device "
        "such as /dev/null");
  return target;
}

llvm::Error mlir::kiln::writeFileOutput(
    llvm::StringRef outPath,
    llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write) {
  llvm::Expected<FileOutputTarget> target = checkFileOutput(outPath);
  if (!target)
    return target.takeError();
  const std::string &dst = target->path;

  if (target->kind == FileOutputTarget::Stdout) {
    if (auto err = write(llvm::outs()))
      return err;
    llvm::outs().flush();
    if (llvm::outs().has_error()) {
      std::error_code ec = llvm::outs().error();
      llvm::outs().clear_error();
      return llvm::createStringError(ec, "cannot write to stdout: " +
                                             ec.message());
    }
    return llvm::Error::success();
  }

  if (target->kind == FileOutputTarget::Device) {
    // In place, as clang does: never created, truncated, renamed or removed.
    int fd = ::open(dst.c_str(), O_WRONLY | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
      return errnoError(errno, "cannot open " + dst + target->via);
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    if (auto err = write(os))
      return err;
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      return llvm::createStringError(ec, dst + target->via +
                                             ": write failed: " + ec.message());
    }
    return llvm::Error::success();
  }

  // A regular file or a new name: a temporary file beside the target (same
  // file system), renamed over it once complete.
  llvm::SmallString<256> pattern(dst);
  pattern.append(".kiln-tmp-XXXXXX");
  (void)pattern.c_str(); // NUL-terminates the buffer mkostemp edits in place
  int fd = -1, handle = -1;
  {
    installHandlers();
    cleanup::DeferSignals defer; // no signal between creating and registering
    fd = ::mkostemp(pattern.data(), O_CLOEXEC);
    if (fd >= 0)
      handle = cleanup::addTree(pattern.str());
  }
  if (fd < 0) {
    int err = errno;
    llvm::SmallString<256> dir(path::parent_path(dst));
    return errnoError(err, dst + target->via +
                               ": cannot write: cannot create a temporary "
                               "file in " +
                               (dir.empty() ? llvm::StringRef(".")
                                            : llvm::StringRef(dir)));
  }
  std::string tmp(pattern.str());
  auto discard = [&]() {
    ::unlink(tmp.c_str());
    cleanup::forget(handle);
  };
  // The new file gets the old one's permissions, or the umask's default.
  struct stat old;
  mode_t mode;
  if (::stat(dst.c_str(), &old) == 0 && S_ISREG(old.st_mode)) {
    mode = old.st_mode & 07777;
  } else {
    mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  ::fchmod(fd, mode);
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    if (auto err = write(os)) {
      os.close();
      os.clear_error();
      discard();
      return err;
    }
    os.close();
    if (os.has_error()) {
      std::error_code ec = os.error();
      os.clear_error();
      discard();
      return llvm::createStringError(ec, dst + target->via +
                                             ": write failed: " + ec.message());
    }
  }
  if (::rename(tmp.c_str(), dst.c_str()) != 0) {
    int err = errno;
    discard();
    return errnoError(err, "cannot rename " + tmp + " to " + dst);
  }
  cleanup::forget(handle);
  return llvm::Error::success();
}

llvm::Expected<std::string>
mlir::kiln::moveDirectoryIntoPlace(llvm::StringRef from, llvm::StringRef to,
                                   llvm::StringRef oldParking,
                                   bool allowExchange) {
  std::string src = from.str(), dst = to.str(), parking = oldParking.str();
  struct stat st;
  if (::lstat(dst.c_str(), &st) != 0) {
    if (errno != ENOENT)
      return errnoError(errno, "cannot inspect " + dst);
    // Nothing there: appear atomically, and never over something that
    // appeared meanwhile.
    if (::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(),
                    RENAME_NOREPLACE) == 0)
      return std::string();
    if (errno == EEXIST)
      return llvm::createStringError(
          dst + " appeared while the output was being written; left it "
                "alone");
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
      return errnoError(errno, "cannot rename " + src + " to " + dst);
    // No RENAME_NOREPLACE here; rename(2) still never replaces a non-empty
    // directory.
    if (::rename(src.c_str(), dst.c_str()) != 0)
      return errnoError(errno, "cannot rename " + src + " to " + dst);
    return std::string();
  }
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode))
    return llvm::createStringError(
        dst + " changed while the output was being written (it is no "
              "longer a directory); left it alone");
  if (allowExchange) {
    if (::renameat2(AT_FDCWD, src.c_str(), AT_FDCWD, dst.c_str(),
                    RENAME_EXCHANGE) == 0)
      return src;
    if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP)
      return errnoError(errno, "cannot exchange " + src + " and " + dst);
  }
  // Two renames; the registered restore puts the old directory back if the
  // process dies between them.
  int restore = cleanup::addRestore(parking, dst);
  if (::rename(dst.c_str(), parking.c_str()) != 0) {
    int err = errno;
    cleanup::forget(restore);
    return errnoError(err, "cannot move " + dst + " aside to " + parking);
  }
  if (::rename(src.c_str(), dst.c_str()) != 0) {
    int err = errno;
    ::rename(parking.c_str(), dst.c_str());
    cleanup::forget(restore);
    return errnoError(err, "cannot rename " + src + " to " + dst);
  }
  cleanup::forget(restore);
  return parking;
}

//===----------------------------------------------------------------------===//
// Stale scratch directories
//===----------------------------------------------------------------------===//

std::vector<std::string>
mlir::kiln::removeStaleScratchDirs(llvm::StringRef parent,
                                   llvm::StringRef prefix) {
  std::vector<std::string> notes;
  std::error_code ec;
  std::vector<std::string> candidates;
  for (fs::directory_iterator it(parent.empty() ? "." : parent, ec,
                                 /*follow_symlinks=*/false),
       end;
       it != end && !ec; it.increment(ec))
    if (path::filename(it->path()).starts_with(prefix))
      candidates.push_back(it->path());
  for (const std::string &p : candidates) {
    struct stat st;
    if (::lstat(p.c_str(), &st) != 0)
      continue;
    auto leave = [&](const llvm::Twine &why) {
      notes.push_back((p + " " + why + "; left it alone").str());
    };
    if (S_ISLNK(st.st_mode)) {
      leave("is a symbolic link, not a temporary directory Kiln made");
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      leave("is not a directory, so not a temporary directory Kiln made");
      continue;
    }
    if (st.st_uid != ::geteuid()) {
      leave("belongs to another user");
      continue;
    }
    int fd = ::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
      continue;
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      leave("is in use by another running Kiln process");
      continue;
    }
    struct stat markerStat;
    bool marked = ::fstatat(fd, kScratchMarker, &markerStat,
                            AT_SYMLINK_NOFOLLOW) == 0 &&
                  S_ISREG(markerStat.st_mode);
    bool empty = true;
    std::error_code listEc;
    for (fs::directory_iterator it(p, listEc, false), end;
         it != end && !listEc; it.increment(listEc)) {
      empty = false;
      break;
    }
    if (!marked && !empty) {
      ::close(fd);
      leave(llvm::Twine("does not hold Kiln's marker file ") + kScratchMarker +
            " (remove it yourself if it is yours)");
      continue;
    }
    int err = removeTree(p.c_str());
    ::close(fd);
    if (err)
      notes.push_back(p + ": could not remove this temporary directory of an "
                          "interrupted run: " +
                      std::strerror(err));
    else
      notes.push_back("removed " + p +
                      ", a temporary directory left by an interrupted run");
  }
  return notes;
}

llvm::Error mlir::kiln::checkOutputIsNotAnInput(
    llvm::StringRef path,
    llvm::ArrayRef<std::pair<llvm::StringRef, llvm::StringRef>> inputs,
    llvm::StringRef outputFlag) {
  namespace fs = llvm::sys::fs;
  if (path == "-" || !fs::exists(path))
    return llvm::Error::success();
  llvm::SmallString<256> real;
  if (fs::real_path(path, real))
    return llvm::Error::success(); // checkFileOutput reports a dangling link
  for (const auto &[flag, input] : inputs) {
    if (input.empty() || input == "-")
      continue;
    llvm::SmallString<256> in;
    if (fs::real_path(input, in))
      continue; // a missing input is reported by its reader
    bool same = real == in;
    if (!same && fs::is_directory(in))
      same = llvm::StringRef(real).starts_with((in + "/").str());
    if (same)
      return llvm::createStringError(
          (outputFlag + " " + path + " is " +
           (real == in ? "the input file " : "a file inside the input ") +
           input + " (" + flag + "); writing it would destroy the input")
              .str());
  }
  return llvm::Error::success();
}
