//===- SafeOutputTest.cpp - scratch directories, atomic replacement -------===//
//
// codegen/Artifact/SafeOutput.h: the pieces kiln-compile's -o relies on,
// tested directly (the tools' behaviour is in test/Tools/output-*.test).
//
//===----------------------------------------------------------------------===//

#include "ImportTestUtils.h"

#include "codegen/Artifact/SafeOutput.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include "gtest/gtest.h"

#include <csignal>
#include <cstdlib>
#include <utility>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace mlir::kiln;
using namespace kiln::test;
namespace fs = llvm::sys::fs;

namespace {

bool exists(const std::string &p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

void makeDir(const std::string &p) { ASSERT_EQ(::mkdir(p.c_str(), 0755), 0) << p; }

/// Inode of `p` (identifies which directory a name points to).
ino_t inode(const std::string &p) {
  struct stat st;
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st.st_ino;
}

TEST(SafeOutput, RemoveTreeNeverFollowsLinks) {
  TempDir dir;
  makeDir(dir.path("outside"));
  writeFileBytes(dir.path("outside/keep"), "precious");
  makeDir(dir.path("tree"));
  makeDir(dir.path("tree/sub"));
  makeDir(dir.path("tree/sub/deeper"));
  writeFileBytes(dir.path("tree/sub/deeper/f"), "x");
  writeFileBytes(dir.path("tree/a"), "y");
  ASSERT_EQ(::symlink(dir.path("outside").c_str(),
                      dir.path("tree/link-to-dir").c_str()),
            0);
  ASSERT_EQ(::symlink(dir.path("outside/keep").c_str(),
                      dir.path("tree/sub/link-to-file").c_str()),
            0);
  EXPECT_EQ(removeTree(dir.path("tree").c_str()), 0);
  EXPECT_FALSE(exists(dir.path("tree")));
  EXPECT_EQ(readFileBytes(dir.path("outside/keep")), "precious");
  // A link given as the tree itself is removed, not followed.
  ASSERT_EQ(::symlink(dir.path("outside").c_str(), dir.path("top").c_str()), 0);
  EXPECT_EQ(removeTree(dir.path("top").c_str()), 0);
  EXPECT_FALSE(exists(dir.path("top")));
  EXPECT_EQ(readFileBytes(dir.path("outside/keep")), "precious");
  // Missing is success.
  EXPECT_EQ(removeTree(dir.path("nothing").c_str()), 0);
}

TEST(SafeOutput, ScratchDirIsPrivateMarkedAndRemoved) {
  TempDir dir;
  std::string first, second;
  {
    llvm::Expected<ScratchDir> a = ScratchDir::create(dir.root(), "x.kiln-tmp-");
    ASSERT_TRUE(bool(a)) << errorMessage(a);
    llvm::Expected<ScratchDir> b = ScratchDir::create(dir.root(), "x.kiln-tmp-");
    ASSERT_TRUE(bool(b)) << errorMessage(b);
    first = std::string(a->path());
    second = std::string(b->path());
    EXPECT_NE(first, second);
    llvm::StringRef name = llvm::sys::path::filename(first);
    EXPECT_TRUE(name.starts_with("x.kiln-tmp-")) << first;
    EXPECT_EQ(name.size(), std::string("x.kiln-tmp-").size() + 6) << first;
    struct stat st;
    ASSERT_EQ(::stat(first.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    EXPECT_TRUE(exists(a->child(kScratchMarker)));
    // Locked while alive.
    int fd = ::open(first.c_str(), O_RDONLY | O_DIRECTORY);
    ASSERT_GE(fd, 0);
    EXPECT_NE(::flock(fd, LOCK_EX | LOCK_NB), 0);
    ::close(fd);
    makeDir(a->child("artifact"));
    writeFileBytes(a->child("artifact/weights.bin"), "w");
    // Moving keeps one owner.
    ScratchDir moved(std::move(*b));
    EXPECT_EQ(moved.path(), second);
  }
  EXPECT_FALSE(exists(first));
  EXPECT_FALSE(exists(second));
}

TEST(SafeOutput, ScratchDirNeedsAnExistingParent) {
  TempDir dir;
  llvm::Expected<ScratchDir> a =
      ScratchDir::create(dir.path("missing"), "x.kiln-tmp-");
  ASSERT_FALSE(bool(a));
  EXPECT_NE(errorMessage(a).find("cannot create a temporary directory in"),
            std::string::npos);
}

TEST(SafeOutput, CleanupRemovesTreesAndRestoresRenames) {
  TempDir dir;
  makeDir(dir.path("tree"));
  writeFileBytes(dir.path("tree/f"), "x");
  makeDir(dir.path("parked"));
  writeFileBytes(dir.path("parked/manifest.json"), "old");
  int tree = cleanup::addTree(dir.path("tree"));
  int restore = cleanup::addRestore(dir.path("parked"), dir.path("target"));
  ASSERT_GE(tree, 0);
  ASSERT_GE(restore, 0);
  cleanup::runForTest(SIGTERM);
  EXPECT_FALSE(exists(dir.path("tree")));
  EXPECT_EQ(readFileBytes(dir.path("target/manifest.json")), "old");
  // Forgotten entries do nothing.
  makeDir(dir.path("kept"));
  cleanup::forget(cleanup::addTree(dir.path("kept")));
  cleanup::runForTest(SIGTERM);
  EXPECT_TRUE(exists(dir.path("kept")));
}

TEST(SafeOutput, CleanupStopsChildProcessGroups) {
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::setpgid(0, 0);
    ::execl("/bin/sleep", "sleep", "300", static_cast<char *>(nullptr));
    ::_exit(127);
  }
  ::setpgid(child, child);
  int handle = cleanup::addChild(child);
  ASSERT_GE(handle, 0);
  cleanup::runForTest(SIGTERM);
  // Reaped by the cleanup: nothing left to wait for.
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

/// Signals this process inherited as ignored (lit starts its tests with
/// SIGINT ignored), recorded before main(): Kiln rightly keeps ignoring
/// them, so they cannot be tested here.
struct InheritedIgnored {
  bool ignored[NSIG] = {};
  InheritedIgnored() {
    for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
      struct sigaction current;
      ignored[sig] = ::sigaction(sig, nullptr, &current) == 0 &&
                     current.sa_handler == SIG_IGN;
    }
  }
} inheritedIgnored;

/// Runs `end` in a child process that holds a ScratchDir (and is compiling,
/// as far as it knows) and returns the child's wait status; the directory
/// must be gone afterwards, however the child ended.
int statusOfChildThatEnds(void (*end)()) {
  TempDir dir;
  std::string pathFile = dir.path("scratch-path");
  pid_t child = ::fork();
  if (child == 0) {
    llvm::Expected<ScratchDir> scratch = ScratchDir::create(dir.root(), "c-");
    if (!scratch)
      ::_exit(100);
    writeFileBytes(pathFile, scratch->path());
    ::mkdir(scratch->child("artifact").c_str(), 0755);
    writeFileBytes(scratch->child("artifact/weights.bin"), "w");
    end();
    ::_exit(101);
  }
  int status = 0;
  EXPECT_EQ(::waitpid(child, &status, 0), child);
  std::string scratchPath = readFileBytes(pathFile);
  EXPECT_FALSE(scratchPath.empty());
  EXPECT_FALSE(exists(scratchPath)) << scratchPath;
  return status;
}

TEST(SafeOutput, ScratchDirRemovedOnSignalsCrashesAndExit) {
  for (auto [sig, end] :
       {std::pair<int, void (*)()>{SIGINT, [] { ::raise(SIGINT); }},
        {SIGTERM, [] { ::kill(::getpid(), SIGTERM); }},
        {SIGHUP, [] { ::raise(SIGHUP); }},
        {SIGABRT, [] { std::abort(); }}}) {
    SCOPED_TRACE(sig);
    if (inheritedIgnored.ignored[sig])
      continue;
    int status = statusOfChildThatEnds(end);
    // The cleanup ran, then the signal still ended the process.
    ASSERT_TRUE(WIFSIGNALED(status)) << status;
    EXPECT_EQ(WTERMSIG(status), sig);
  }
  int status = statusOfChildThatEnds([] { std::exit(3); });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

TEST(SafeOutput, RunProcessReportsStatusAndOutput) {
  TempDir dir;
  std::string log = dir.path("out.log");
  llvm::Expected<int> ok = runProcess({"/bin/sh", "-c", "echo hello; exit 3"}, log);
  ASSERT_TRUE(bool(ok)) << errorMessage(ok);
  EXPECT_EQ(*ok, 3);
  EXPECT_EQ(readFileBytes(log), "hello\n");
  llvm::Expected<int> killed =
      runProcess({"/bin/sh", "-c", "kill -TERM $$"}, log);
  ASSERT_TRUE(bool(killed)) << errorMessage(killed);
  EXPECT_EQ(*killed, -SIGTERM);
  // The child's TMPDIR, when given.
  ::mkdir(dir.path("t").c_str(), 0700);
  ::unlink(log.c_str());
  llvm::Expected<int> env =
      runProcess({"/bin/sh", "-c", "echo \"$TMPDIR\""}, log, dir.path("t"));
  ASSERT_TRUE(bool(env)) << errorMessage(env);
  EXPECT_EQ(readFileBytes(log), dir.path("t") + "\n");
  llvm::Expected<int> missing = runProcess({dir.path("no-such-program")}, log);
  ASSERT_FALSE(bool(missing));
  EXPECT_NE(errorMessage(missing).find("cannot run"), std::string::npos);
}

TEST(SafeOutput, MoveIntoPlaceCreatesOrExchanges) {
  for (bool exchange : {true, false}) {
    SCOPED_TRACE(exchange ? "exchange" : "two renames");
    TempDir dir;
    makeDir(dir.path("new"));
    writeFileBytes(dir.path("new/manifest.json"), "new");
    // Absent target: created.
    llvm::Expected<std::string> old = moveDirectoryIntoPlace(
        dir.path("new"), dir.path("out"), dir.path("parked"), exchange);
    ASSERT_TRUE(bool(old)) << errorMessage(old);
    EXPECT_EQ(*old, "");
    EXPECT_EQ(readFileBytes(dir.path("out/manifest.json")), "new");
    // Existing target: replaced, the old one handed back.
    makeDir(dir.path("newer"));
    writeFileBytes(dir.path("newer/manifest.json"), "newer");
    ino_t newerInode = inode(dir.path("newer"));
    old = moveDirectoryIntoPlace(dir.path("newer"), dir.path("out"),
                                 dir.path("parked"), exchange);
    ASSERT_TRUE(bool(old)) << errorMessage(old);
    EXPECT_EQ(inode(dir.path("out")), newerInode);
    EXPECT_EQ(readFileBytes(dir.path("out/manifest.json")), "newer");
    EXPECT_EQ(readFileBytes(*old + "/manifest.json"), "new");
    if (exchange)
      EXPECT_EQ(*old, dir.path("newer")); // RENAME_EXCHANGE: swapped names
    else
      EXPECT_EQ(*old, dir.path("parked"));
  }
}

TEST(SafeOutput, MoveIntoPlaceRefusesAFileOrLink) {
  TempDir dir;
  makeDir(dir.path("new"));
  writeFileBytes(dir.path("file"), "data");
  llvm::Expected<std::string> old = moveDirectoryIntoPlace(
      dir.path("new"), dir.path("file"), dir.path("parked"));
  ASSERT_FALSE(bool(old));
  EXPECT_EQ(readFileBytes(dir.path("file")), "data");
  ASSERT_EQ(::symlink("new", dir.path("link").c_str()), 0);
  old = moveDirectoryIntoPlace(dir.path("new"), dir.path("link"),
                               dir.path("parked"));
  ASSERT_FALSE(bool(old));
  EXPECT_TRUE(exists(dir.path("new")));
}

TEST(SafeOutput, ResolveOutputPath) {
  TempDir dir;
  makeDir(dir.path("real"));
  ASSERT_EQ(::symlink("real", dir.path("link").c_str()), 0);
  ASSERT_EQ(::symlink("missing", dir.path("dangling").c_str()), 0);
  llvm::Expected<ResolvedOutput> r = resolveOutputPath(dir.path("out.kiln//"));
  ASSERT_TRUE(bool(r)) << errorMessage(r);
  EXPECT_EQ(r->path, dir.path("out.kiln"));
  EXPECT_EQ(r->symlinkVia, "");
  r = resolveOutputPath(dir.path("link") + "/");
  ASSERT_TRUE(bool(r)) << errorMessage(r);
  llvm::SmallString<256> real;
  ASSERT_FALSE(fs::real_path(dir.path("real"), real));
  EXPECT_EQ(r->path, std::string(real.str()));
  EXPECT_EQ(r->symlinkVia, dir.path("link"));
  r = resolveOutputPath(dir.path("dangling"));
  ASSERT_FALSE(bool(r));
  EXPECT_NE(errorMessage(r).find("is a symbolic link to 'missing'"),
            std::string::npos);
  for (std::string bad : {std::string(""), std::string("."), std::string("/"),
                          dir.path("real") + "/..", std::string("a/./")}) {
    r = resolveOutputPath(bad);
    EXPECT_FALSE(bool(r)) << bad;
    llvm::consumeError(r.takeError());
  }
  EXPECT_EQ(stripTrailingSlashes("/"), "/");
  EXPECT_EQ(stripTrailingSlashes("a///"), "a");
}

TEST(SafeOutput, StaleScratchDirsRemovedOnlyWhenProvablyKilns) {
  TempDir dir;
  std::string prefix = "o.kiln.kiln-tmp-";
  // Killed run: marker, unlocked -> removed.
  makeDir(dir.path(prefix + "dead01"));
  writeFileBytes(dir.path(prefix + "dead01/" + kScratchMarker), "");
  makeDir(dir.path(prefix + "dead01/artifact"));
  writeFileBytes(dir.path(prefix + "dead01/artifact/weights.bin"), "w");
  // Killed between mkdtemp and the marker: empty -> removed.
  makeDir(dir.path(prefix + "empty1"));
  // Live run (locked) -> kept.
  llvm::Expected<ScratchDir> live = ScratchDir::create(dir.root(), prefix);
  ASSERT_TRUE(bool(live)) << errorMessage(live);
  // Someone's directory without the marker -> kept.
  makeDir(dir.path(prefix + "users1"));
  writeFileBytes(dir.path(prefix + "users1/data"), "mine");
  // A link and a file -> kept, the link's target untouched.
  makeDir(dir.path("victim"));
  writeFileBytes(dir.path("victim/" + std::string(kScratchMarker)), "");
  ASSERT_EQ(::symlink(dir.path("victim").c_str(),
                      dir.path(prefix + "link01").c_str()),
            0);
  writeFileBytes(dir.path(prefix + "file01"), "f");
  // Other names are not looked at.
  makeDir(dir.path("other.kiln-tmp-abcdef"));
  writeFileBytes(dir.path("other.kiln-tmp-abcdef/" + std::string(kScratchMarker)),
                 "");

  std::vector<std::string> notes = removeStaleScratchDirs(dir.root(), prefix);
  std::string all;
  for (const std::string &n : notes)
    all += n + "\n";
  EXPECT_EQ(notes.size(), 6u) << all;
  EXPECT_FALSE(exists(dir.path(prefix + "dead01")));
  EXPECT_FALSE(exists(dir.path(prefix + "empty1")));
  EXPECT_TRUE(exists(std::string(live->path())));
  EXPECT_EQ(readFileBytes(dir.path(prefix + "users1/data")), "mine");
  EXPECT_TRUE(exists(dir.path(prefix + "link01")));
  EXPECT_TRUE(exists(dir.path("victim/" + std::string(kScratchMarker))));
  EXPECT_TRUE(exists(dir.path(prefix + "file01")));
  EXPECT_TRUE(exists(dir.path("other.kiln-tmp-abcdef")));
  EXPECT_NE(all.find("removed " + dir.path(prefix + "dead01") +
                     ", a temporary directory left by an interrupted run"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("is in use by another running Kiln process"),
            std::string::npos)
      << all;
  EXPECT_NE(all.find("does not hold Kiln's marker file"), std::string::npos)
      << all;
  EXPECT_NE(all.find("is a symbolic link, not a temporary directory Kiln made"),
            std::string::npos)
      << all;
}

} // namespace

namespace {

/// Names in `dir` that start with `prefix` (leftover temporary files).
int countPrefixed(const std::string &dir, const std::string &prefix) {
  int n = 0;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::path::filename(it->path()).starts_with(prefix))
      ++n;
  return n;
}

TEST(SafeOutput, WriteFileOutputReplacesAtomically) {
  TempDir dir;
  std::string out = dir.path("out.mlir");
  writeFileBytes(out, "old");
  ASSERT_EQ(::chmod(out.c_str(), 0640), 0);
  llvm::Error e = writeFileOutput(out, [](llvm::raw_ostream &os) {
    os << "new";
    return llvm::Error::success();
  });
  ASSERT_FALSE(bool(e)) << errorMessage(std::move(e));
  EXPECT_EQ(readFileBytes(out), "new");
  struct stat st;
  ASSERT_EQ(::stat(out.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0640u) << "a replaced file keeps its mode";
  EXPECT_EQ(countPrefixed(dir.root(), "out.mlir.kiln-tmp-"), 0);

  // A failing writer leaves the old contents and no temporary file.
  e = writeFileOutput(out, [](llvm::raw_ostream &os) {
    os << "partial";
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "writer failed");
  });
  ASSERT_TRUE(bool(e));
  EXPECT_EQ(errorMessage(std::move(e)), "writer failed");
  EXPECT_EQ(readFileBytes(out), "new");
  EXPECT_EQ(countPrefixed(dir.root(), "out.mlir.kiln-tmp-"), 0);
}

TEST(SafeOutput, WriteFileOutputFollowsLinksAndRefusesNonFiles) {
  TempDir dir;
  writeFileBytes(dir.path("target.txt"), "old");
  ASSERT_EQ(::symlink("target.txt", dir.path("link.txt").c_str()), 0);
  llvm::Error e = writeFileOutput(dir.path("link.txt"), [](llvm::raw_ostream &os) {
    os << "via link";
    return llvm::Error::success();
  });
  ASSERT_FALSE(bool(e)) << errorMessage(std::move(e));
  EXPECT_EQ(readFileBytes(dir.path("target.txt")), "via link");
  struct stat st;
  ASSERT_EQ(::lstat(dir.path("link.txt").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link itself is kept";

  makeDir(dir.path("adir"));
  ASSERT_EQ(::mkfifo(dir.path("fifo").c_str(), 0600), 0);
  for (const char *name : {"adir", "fifo"}) {
    bool called = false;
    e = writeFileOutput(dir.path(name), [&](llvm::raw_ostream &) {
      called = true;
      return llvm::Error::success();
    });
    ASSERT_TRUE(bool(e)) << name;
    std::string msg = errorMessage(std::move(e));
    EXPECT_NE(msg.find(dir.path(name)), std::string::npos) << msg;
    EXPECT_FALSE(called) << name << ": nothing is written to a refused path";
  }
  // A character device is written in place, never replaced.
  e = writeFileOutput("/dev/null", [](llvm::raw_ostream &os) {
    os << "discarded";
    return llvm::Error::success();
  });
  ASSERT_FALSE(bool(e)) << errorMessage(std::move(e));
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

} // namespace
