// Whole-file reads, durable file writes (write to a temporary name, fsync, rename over the
// target; whole or streamed), and removing a directory tree.
#pragma once

#include <cstddef>
#include <string>
#include <system_error>

namespace cadre {

// Replaces `path` with `bytes` atomically: readers see the old file or the new, never a part.
// Concurrent writers of one path each write a temporary of their own; the last rename wins.
void file_write_atomic(const std::string& path, const std::string& bytes);

// A file written piece by piece and published atomically, for files too large to build in
// memory first: bytes go to a temporary name beside `path`; commit() fsyncs and renames it
// over `path`. Destroyed uncommitted (an error part way), the temporary is removed and `path`
// is untouched.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t bytes);  // Error naming the file on failure
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  int fd_ = -1;
};

// The whole content of `path`; Error naming the file when it cannot be read.
std::string file_read(const std::string& path);

// Removes `path` and everything below it (symbolic links themselves, never what they point
// to); a missing `path` is not an error. `ec` holds the first failure, and the rest is still
// attempted. Not std::filesystem::remove_all: libtorch 2.x's libtorch.so exports its own copy
// of it, built against another libstdc++, which the dynamic linker may bind our calls to (a
// crash in the checkpoint tests there).
void remove_tree(const std::string& path, std::error_code& ec);
// As above; Error naming the path and the system error on failure.
void remove_tree(const std::string& path);

}  // namespace cadre
