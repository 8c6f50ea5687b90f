//===- ToolSupport.cpp - what every Kiln command-line tool shares ---------===//

#include "tools/common/ToolSupport.h"
#include "tools/common/KilnVersion.inc"

#include "kiln_rt/cuda_abi.h"
#include "kiln_rt/kernel_abi.h"

#include "llvm/Config/llvm-config.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/PrettyStackTrace.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <string>
#include <type_traits>

namespace cl = llvm::cl;

namespace kiln::tool {
namespace {

/// cl::getRegisteredOptions(): option name -> option.
using OptionMap =
    std::remove_reference_t<decltype(cl::getRegisteredOptions())>;

std::string &nameStorage() {
  static std::string name = "kiln";
  return name;
}
ToolKind gKind = ToolKind::Runtime;
const char *gArgv0 = nullptr;

/// LLVM prints this (setBugReportMsg) before its stack dump on a crash.
std::string &bugReportStorage() {
  static std::string message;
  return message;
}

/// install_fatal_error_handler: LLVM/MLIR fatal errors in the tool's voice
/// (LLVM exits with status 1 after this returns).
void fatalErrorHandler(void *, const char *reason, bool) {
  llvm::errs() << toolName() << ": error: " << reason << "\n";
}

/// `-n` for one-letter names, `--name` otherwise, as --help shows them.
std::string dashed(llvm::StringRef name) {
  return (name.size() == 1 ? "-" : "--") + name.str();
}

/// Whether the registered option `o` is shown by --help (and so worth
/// suggesting).
bool isVisible(const cl::Option *o) {
  return o->getOptionHiddenFlag() == cl::NotHidden;
}

/// Whether `name` (no dashes, no "=value") is accepted by llvm::cl: a
/// registered option, a prefix option followed by its value (-O3), or a
/// group of one-letter grouping options (-abc).
bool isKnown(llvm::StringRef name,
             const OptionMap &options) {
  if (options.count(name))
    return true;
  for (size_t len = name.size() - 1; len > 0; --len) {
    auto it = options.find(name.take_front(len));
    if (it != options.end() &&
        (it->second->getFormattingFlag() == cl::Prefix ||
         it->second->getFormattingFlag() == cl::AlwaysPrefix))
      return true;
  }
  bool grouped = name.size() > 1;
  for (char c : name) {
    auto it = options.find(llvm::StringRef(&c, 1));
    grouped = grouped && it != options.end() &&
              (it->second->getMiscFlags() & cl::Grouping);
  }
  return grouped;
}

/// The visible option the user most likely meant by `name`, or "".
std::string suggest(llvm::StringRef name,
                    const OptionMap &options,
                    llvm::ArrayRef<FlagAlias> aliases) {
  static const FlagAlias kCommon[] = {{"output", "o"}, {"out", "o"}};
  for (llvm::ArrayRef<FlagAlias> list : {aliases, llvm::ArrayRef(kCommon)})
    for (const FlagAlias &alias : list)
      if (alias.typed == name && options.count(alias.meant))
        return alias.meant.str();
  // A unique visible option that `name` abbreviates (--temp).
  std::string prefixMatch;
  int prefixMatches = 0;
  // Else the closest visible option within a small edit distance.
  std::string best;
  unsigned bestDistance = 0;
  unsigned limit = std::max<unsigned>(1, unsigned(name.size() + 2) / 4);
  for (const auto &entry : options) {
    llvm::StringRef candidate = entry.first;
    if (!isVisible(entry.second) || candidate.empty())
      continue;
    if (name.size() >= 3 && candidate.starts_with(name)) {
      ++prefixMatches;
      prefixMatch = candidate.str();
    }
    if (name.size() <= 2)
      continue; // one- and two-letter typos are not guessable
    unsigned distance = name.edit_distance_insensitive(candidate, true, limit);
    if (distance <= limit && (best.empty() || distance < bestDistance ||
                              (distance == bestDistance && candidate < best))) {
      best = candidate.str();
      bestDistance = distance;
    }
  }
  if (prefixMatches == 1)
    return prefixMatch;
  return best;
}

} // namespace

llvm::StringRef toolName() { return nameStorage(); }

llvm::StringRef kilnVersion() { return KILN_VERSION_STRING; }

void printVersion(llvm::raw_ostream &os) {
  os << toolName() << " (Kiln) " << kilnVersion() << "\n";
  if (gKind == ToolKind::Compiler)
    os << "  LLVM and MLIR " << LLVM_VERSION_STRING << "\n";
  os << "  runtime: kernel ABI " << KILN_ABI_VERSION << ", CUDA ABI "
     << KILN_CUDA_ABI_VERSION << "\n";
}

ToolMain::ToolMain(int &argc, char **&argv, llvm::StringRef name,
                   ToolKind kind)
    : init(argc, argv) {
  nameStorage() = name.str();
  gKind = kind;
  gArgv0 = argv[0];
  bugReportStorage() =
      (name + " crashed. This is a bug in Kiln: please report it with the "
              "command line, the output of `" +
       name + " --version` and the stack dump below (README.md, \"Reporting "
              "a bug\").\n")
          .str();
  llvm::setBugReportMsg(bugReportStorage().c_str());
  llvm::install_fatal_error_handler(fatalErrorHandler, nullptr);
  cl::SetVersionPrinter(printVersion);
  // libLLVM registers a hidden `--threads` of its own that no Kiln tool
  // uses; it would accept the flag silently. The tools that run artifacts
  // register Kiln's (Threads.h threadsOption) after this.
  if (cl::Option *llvmThreads = cl::getRegisteredOptions().lookup("threads"))
    llvmThreads->removeArgument();
  // Test hook (test/Tools/crash-banner.test): crash on purpose, after the
  // handlers are in place. SIGABRT, which sanitizers leave to LLVM.
  if (const char *crash = std::getenv("KILN_TEST_CRASH"); crash && *crash)
    std::abort();
}

void checkUnknownOptions(int argc, const char *const *argv,
                         llvm::ArrayRef<FlagAlias> aliases,
                         llvm::ArrayRef<llvm::StringRef> extraValueOptions) {
  const OptionMap &options = cl::getRegisteredOptions();
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--")
      return; // the rest is positional
    if (!arg.starts_with("-") || arg == "-")
      continue;
    llvm::StringRef body = arg.drop_front(arg.starts_with("--") ? 2 : 1);
    auto [name, value] = body.split('=');
    bool hasValue = body.contains('=');
    if (llvm::is_contained(extraValueOptions, name)) {
      i += hasValue ? 0 : 1;
      continue;
    }
    if (auto it = options.find(name); it != options.end()) {
      // A value given as the next argument is not an option.
      if (!hasValue && it->second->getValueExpectedFlag() == cl::ValueRequired)
        ++i;
      continue;
    }
    if (!name.empty() && isKnown(name, options))
      continue;
    std::string typed = arg.substr(0, arg.size() - (hasValue ? value.size() + 1 : 0)).str();
    std::string meant = suggest(name, options, aliases);
    llvm::errs() << toolName() << ": error: unknown option '" << typed << "'";
    if (!meant.empty())
      llvm::errs() << "; did you mean '" << dashed(meant) << "'?\n";
    else
      llvm::errs() << " (see " << toolName() << " --help)\n";
    std::exit(1);
  }
}

void parseCommandLine(int argc, const char *const *argv,
                      llvm::StringRef overview,
                      llvm::ArrayRef<FlagAlias> aliases) {
  checkUnknownOptions(argc, argv, aliases);
  std::string errors;
  llvm::raw_string_ostream os(errors);
  if (cl::ParseCommandLineOptions(argc, argv, overview, &os))
    return;
  // LLVM writes "<program>: <message>" over one or more lines; keep the
  // first, in the tool's voice.
  llvm::StringRef text = llvm::StringRef(errors).trim();
  text = text.take_until([](char c) { return c == '\n'; }).trim();
  llvm::StringRef program = llvm::sys::path::filename(argv[0]);
  text.consume_front(program.str() + ": ");
  std::string message = text.str();
  if (text.starts_with("Not enough positional command line arguments")) {
    message = "missing";
    for (cl::Option *o : cl::SubCommand::getTopLevel().PositionalOpts)
      if (o->getNumOccurrencesFlag() == cl::Required ||
          o->getNumOccurrencesFlag() == cl::OneOrMore)
        message += " " + o->HelpStr.str();
  } else if (text.starts_with("Too many positional arguments")) {
    message = "too many positional arguments";
  } else if (message.empty()) {
    // An option's own handler already printed its one line ("<tool>: for
    // the --max-tokens option: 'abc' value invalid ...") on stderr.
    std::exit(1);
  }
  llvm::errs() << toolName() << ": error: " << message << " (see "
               << toolName() << " --help)\n";
  std::exit(1);
}

std::string dataFilePath(llvm::StringRef name) {
  if (!gArgv0)
    return "";
  std::string exe = llvm::sys::fs::getMainExecutable(
      gArgv0, reinterpret_cast<void *>(&dataFilePath));
  if (exe.empty())
    return "";
  llvm::SmallString<256> path(llvm::sys::path::parent_path(exe));
  llvm::sys::path::append(path, "..", "share", "kiln", name);
  llvm::sys::path::remove_dots(path, /*remove_dot_dot=*/true);
  return path.str().str();
}

} // namespace kiln::tool
