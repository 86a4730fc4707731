// Whole-file reads, atomic file replacement, and removing directory trees.
#include "core/file_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

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

namespace {

// A name of the writer's own beside `path`: two processes writing the same file (agents of
// several nodes sharing a log directory) must not rename each other's temporary file away.
std::string temporary_name_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  host[sizeof host - 1] = 0;
  return str(path, ".tmp.", host, ".", ::getpid(), ".", counter++);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(temporary_name_for(path_)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  CADRE_CHECK(fd_ >= 0, "cannot create '", tmp_, "': ", std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ < 0) return;
  ::close(fd_);
  ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  CADRE_CHECK(fd_ >= 0, "'", path_, "' was already committed");
  const char* p = static_cast<const char*>(data);
  size_t off = 0;
  while (off < bytes) {
    ssize_t w = ::write(fd_, p + off, bytes - off);
    if (w < 0 && errno == EINTR) continue;
    CADRE_CHECK(w > 0, "cannot write '", tmp_, "': ", std::strerror(errno));
    off += static_cast<size_t>(w);
  }
}

void AtomicFile::commit() {
  CADRE_CHECK(fd_ >= 0, "'", path_, "' was already committed");
  CADRE_CHECK(::fsync(fd_) == 0, "cannot fsync '", tmp_, "': ", std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  ::close(fd);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw Error(str("cannot rename '", tmp_, "' to '", path_, "': ", std::strerror(err)));
  }
}

void file_write_atomic(const std::string& path, const std::string& bytes) {
  AtomicFile file(path);
  file.write(bytes.data(), bytes.size());
  file.commit();
}

namespace {

// Depth-first removal below the directory `fd` refers to (then closed), by names relative to
// it, so a tree renamed or replaced meanwhile is never followed elsewhere.
void remove_below(int fd, std::error_code& ec) {
  DIR* dir = ::fdopendir(fd);
  if (!dir) {
    if (!ec) ec = std::error_code(errno, std::generic_category());
    ::close(fd);
    return;
  }
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st {};
    if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno != ENOENT && !ec) ec = std::error_code(errno, std::generic_category());
      continue;
    }
    if (S_ISDIR(st.st_mode)) {
      const int child = ::openat(fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child >= 0) remove_below(child, ec);
      else if (errno != ENOENT && !ec) ec = std::error_code(errno, std::generic_category());
    }
    if (::unlinkat(fd, name.c_str(), S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) != 0 && errno != ENOENT && !ec)
      ec = std::error_code(errno, std::generic_category());
  }
  ::closedir(dir);  // closes fd
}

}  // namespace

void remove_tree(const std::string& path, std::error_code& ec) {
  ec.clear();
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) ec = std::error_code(errno, std::generic_category());
    return;
  }
  if (S_ISDIR(st.st_mode)) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      ec = std::error_code(errno, std::generic_category());
      return;
    }
    remove_below(fd, ec);
  }
  if ((S_ISDIR(st.st_mode) ? ::rmdir(path.c_str()) : ::unlink(path.c_str())) != 0 && errno != ENOENT && !ec)
    ec = std::error_code(errno, std::generic_category());
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  remove_tree(path, ec);
  if (ec) throw Error(str("cannot remove '", path, "': ", ec.message()));
}

}  // namespace cadre
