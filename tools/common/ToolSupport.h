//===- ToolSupport.h - what every Kiln command-line tool shares -*- C++ -*-===//
//
// Kiln's own voice for its tools (kiln-compile, kiln-run, kiln-bench,
// kiln-eval, kiln-calibrate, kiln-opt):
//   * a crash prints Kiln's banner (not LLVM's "submit a bug report to
//     llvm-project"), then LLVM's stack dump;
//   * --version prints Kiln's version (git describe at build time), the LLVM
//     version for the compiler tools and the runtime ABI versions;
//   * a mistyped flag is one line, `<tool>: error: unknown option '-n'; did
//     you mean '--max-tokens'?`, and every other command-line error is one
//     line too;
//   * fatal LLVM errors are reported as `<tool>: error: ...`.
// Usage:
//   int main(int argc, char **argv) {
//     kiln::tool::ToolMain tool(argc, argv, "kiln-run",
//                               kiln::tool::ToolKind::Runtime);
//     cl::HideUnrelatedOptions(category);
//     kiln::tool::parseCommandLine(argc, argv, "overview", kRunAliases);
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_COMMON_TOOLSUPPORT_H
#define KILN_TOOLS_COMMON_TOOLSUPPORT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/InitLLVM.h"

#include <string>

namespace kiln::tool {

/// What --version reports: compiler tools (MLIR/LLVM inside) add the LLVM
/// version; runtime tools (artifacts only, llvm::cl for flags) do not.
enum class ToolKind { Compiler, Runtime };

/// A flag name other tools use for one of ours (`-n` of llama.cpp for
/// `--max-tokens`): suggested when that name is typed. Names without dashes.
struct FlagAlias {
  llvm::StringRef typed;
  llvm::StringRef meant;
};

/// Sets up a tool: LLVM's signal handlers and stack dump with Kiln's crash
/// banner, a fatal-error handler in the tool's voice, and the --version
/// printer. With the environment variable KILN_TEST_CRASH set (tests only)
/// the tool aborts right here, so that the crash banner can be tested.
class ToolMain {
public:
  ToolMain(int &argc, char **&argv, llvm::StringRef name, ToolKind kind);

private:
  llvm::InitLLVM init;
};

/// The tool's name as given to ToolMain ("kiln" before).
llvm::StringRef toolName();

/// Kiln's version: `git describe` of the source tree at build time, or the
/// project version when the tree is not a git checkout (a tarball).
llvm::StringRef kilnVersion();

/// Prints what --version prints (tool, Kiln version, LLVM version for
/// compiler tools, runtime ABI versions) to `os`.
void printVersion(llvm::raw_ostream &os);

/// Exits with status 1 after printing `<tool>: error: <message>` (one line)
/// if argv[1..] has an option that no registered llvm::cl option accepts;
/// suggests the closest visible option (an alias from `aliases`, a unique
/// prefix, or a small edit distance). `extraValueOptions` names options that
/// are registered only later (kiln-opt's -o) and take a value.
void checkUnknownOptions(int argc, const char *const *argv,
                         llvm::ArrayRef<FlagAlias> aliases = {},
                         llvm::ArrayRef<llvm::StringRef> extraValueOptions = {});

/// checkUnknownOptions(), then llvm::cl::ParseCommandLineOptions(); any
/// error becomes one line `<tool>: error: ...` and exit status 1.
void parseCommandLine(int argc, const char *const *argv,
                      llvm::StringRef overview,
                      llvm::ArrayRef<FlagAlias> aliases = {});

/// The path of `name` among the data files shipped with Kiln
/// (<dir of the executable>/../share/kiln/<name>: build/share/kiln in the
/// build tree), or "" if the executable's path is unknown.
std::string dataFilePath(llvm::StringRef name);

} // namespace kiln::tool

#endif // KILN_TOOLS_COMMON_TOOLSUPPORT_H
