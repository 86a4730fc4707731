// Whole-file reads and atomic file replacement.
#include "core/file_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace cadre {

std::string file_read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  CADRE_CHECK(in, "cannot read '", path, "': ", std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  CADRE_CHECK(!in.bad(), "cannot read '", path, "'");
  return ss.str();
}

void file_write_atomic(const std::string& path, const std::string& bytes) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CADRE_CHECK(fd >= 0, "cannot create '", tmp, "': ", std::strerror(errno));
  size_t off = 0;
  while (off < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Error(str("cannot write '", tmp, "': ", std::strerror(err)));
    }
    off += static_cast<size_t>(w);
  }
  if (::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    throw Error(str("cannot fsync '", tmp, "': ", std::strerror(err)));
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error(str("cannot rename '", tmp, "' to '", path, "': ", std::strerror(err)));
  }
}

}  // namespace cadre
