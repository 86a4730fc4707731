// mmap/munmap of whole files.
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace cadre {

MappedFile::MappedFile(const std::string& path, const char* what, size_t min_size) {
  int fd = ::open(path.c_str(), O_RDONLY);
  CADRE_CHECK(fd >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error(str("cannot stat ", what, " '", path, "': ", std::strerror(e)));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < min_size) {
    ::close(fd);
    throw Error(str(what, " '", path, "' is truncated: ", size_, " bytes, its header needs ", min_size));
  }
  void* m = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
  int e = errno;
  ::close(fd);
  CADRE_CHECK(m != MAP_FAILED, "cannot mmap ", what, " '", path, "': ", std::strerror(e));
  data_ = static_cast<const uint8_t*>(m);
}

MappedFile::MappedFile(MappedFile&& o) noexcept : data_(o.data_), size_(o.size_) { o.data_ = nullptr; }

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace cadre
