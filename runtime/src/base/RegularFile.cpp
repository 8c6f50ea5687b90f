//===- RegularFile.cpp - Bounded reads of regular files -------------------===//

#include "base/RegularFile.h"

#include <cerrno>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace kiln::rt {

static std::string describeKind(mode_t m) {
  if (S_ISDIR(m))
    return "a directory";
  if (S_ISFIFO(m))
    return "a FIFO (named pipe)";
  if (S_ISCHR(m))
    return "a character device";
  if (S_ISBLK(m))
    return "a block device";
  if (S_ISSOCK(m))
    return "a socket";
  return "not a regular file";
}

bool readRegularFile(const std::string &path, uint64_t maxBytes,
                     const std::string &what, std::string &out,
                     std::string &error, mode_t *mode) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    error = path + ": cannot open: " + std::strerror(errno);
    return false;
  }
  struct stat st;
  bool ok = true;
  if (::fstat(fd, &st) != 0) {
    ok = false;
    error = path + ": cannot stat: " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    ok = false;
    error = path + ": is " + describeKind(st.st_mode) + ", expected " + what;
  } else if (uint64_t(st.st_size) > maxBytes) {
    ok = false;
    error = path + ": " + std::to_string(st.st_size) + " bytes, more than the " +
            std::to_string(maxBytes) + " bytes " + what + " may have";
  }
  if (ok) {
    if (mode)
      *mode = st.st_mode;
    out.assign(size_t(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
      ssize_t got = ::read(fd, &out[done], out.size() - done);
      if (got < 0 && errno == EINTR)
        continue;
      if (got <= 0) {
        ok = false;
        error = path + ": read error: " +
                (got < 0 ? std::string(std::strerror(errno))
                         : std::string("the file shrank while reading"));
        break;
      }
      done += size_t(got);
    }
  }
  ::close(fd);
  return ok;
}

bool readBoundedStdin(uint64_t maxBytes, std::string &out, std::string &error) {
  out.clear();
  char buf[65536];
  for (;;) {
    ssize_t got = ::read(0, buf, sizeof(buf));
    if (got < 0 && errno == EINTR)
      continue;
    if (got < 0) {
      error = std::string("cannot read standard input: ") + std::strerror(errno);
      return false;
    }
    if (got == 0)
      return true;
    if (out.size() + size_t(got) > maxBytes) {
      error = "standard input has more than " + std::to_string(maxBytes) +
              " bytes";
      return false;
    }
    out.append(buf, size_t(got));
  }
}

} // namespace kiln::rt
