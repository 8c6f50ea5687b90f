//===- KilnKeygen.cpp - Ed25519 keys for signing artifacts --------*- C++ -*-===//
//
// kiln-keygen KEY            writes the secret key KEY (mode 0600) and the
//                            public key KEY.pub; refuses to overwrite either
// kiln-keygen --public KEY   prints the public key line of secret key KEY
//
// Key file formats (one line each) are in runtime/src/sign/Signing.h and
// docs/security.md. Sign with `kiln-compile --sign-key KEY`; verify with
// `kiln-run --trusted-keys DIR` where DIR holds KEY.pub. Errors:
// "kiln-keygen: error: ..." on stderr and exit status 1.
//
//===----------------------------------------------------------------------===//
#include "sign/Signing.h"
#include "tools/common/ToolSupport.h"

#include "llvm/Support/CommandLine.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace cl = llvm::cl;

static cl::OptionCategory keygenCategory("kiln-keygen options");

static cl::opt<std::string> keyPath(cl::Positional, cl::Required,
                                    cl::desc("<secret key file>"),
                                    cl::cat(keygenCategory));
static cl::opt<bool> printPublic(
    "public",
    cl::desc("Print the public key of the existing secret key file instead "
             "of generating a key pair"),
    cl::cat(keygenCategory));

[[noreturn]] static void fail(const std::string &message) {
  std::fprintf(stderr, "kiln-keygen: error: %s\n", message.c_str());
  std::exit(1);
}

/// Creates `path` (never replacing or following anything there) with `mode`
/// and writes `text`; false with `error` set on failure.
static bool createFile(const std::string &path, const std::string &text,
                       mode_t mode, std::string &error) {
  int fd = ::open(path.c_str(),
                  O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) {
    error = path + ": cannot create: " + std::strerror(errno) +
            (errno == EEXIST ? " (kiln-keygen never replaces a key file)" : "");
    return false;
  }
  bool ok = ::fchmod(fd, mode) == 0;
  for (size_t done = 0; ok && done < text.size();) {
    ssize_t put = ::write(fd, text.data() + done, text.size() - done);
    if (put < 0 && errno == EINTR)
      continue;
    ok = put > 0;
    done += put > 0 ? size_t(put) : 0;
  }
  ok = ::fsync(fd) == 0 && ok;
  if (::close(fd) != 0)
    ok = false;
  if (!ok) {
    error = path + ": cannot write: " + std::strerror(errno);
    ::unlink(path.c_str());
  }
  return ok;
}

int main(int argc, char **argv) {
  kiln::tool::ToolMain tool(argc, argv, "kiln-keygen",
                            kiln::tool::ToolKind::Runtime);
  cl::HideUnrelatedOptions(keygenCategory);
  kiln::tool::parseCommandLine(
      argc, argv,
      "Kiln artifact signing keys (Ed25519, docs/security.md)\n\n"
      "  kiln-keygen KEY           write secret key KEY (0600) and KEY.pub\n"
      "  kiln-keygen --public KEY  print KEY's public key line\n\n"
      "Sign with kiln-compile --sign-key KEY; check with\n"
      "kiln-run --trusted-keys DIR, DIR holding KEY.pub.\n");
  std::string error;
  if (!kiln::sign::initialize(error))
    fail(error);

  if (printPublic) {
    kiln::sign::SecretKey key;
    if (!kiln::sign::readSecretKeyFile(keyPath, key, error))
      fail(error);
    std::fputs(kiln::sign::formatPublicKey(key.publicKey).c_str(), stdout);
    return 0;
  }

  const std::string pubPath = keyPath + ".pub";
  kiln::sign::SecretKey key;
  if (!kiln::sign::generateKey(key, error))
    fail(error);
  if (!createFile(keyPath, kiln::sign::formatSecretKey(key), 0600, error))
    fail(error);
  if (!createFile(pubPath, kiln::sign::formatPublicKey(key.publicKey), 0644,
                  error)) {
    ::unlink(keyPath.c_str());
    fail(error);
  }
  std::fprintf(stderr, "kiln-keygen: wrote secret key %s (keep it private) "
                       "and public key %s\n",
               keyPath.c_str(), pubPath.c_str());
  return 0;
}
