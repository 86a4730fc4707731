// Image shard reading and writing.
#include "data/image_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/file_util.h"
#include "data/token_shard.h"

namespace cadre {

uint64_t image_shard_write(const std::string& path, ImageShape shape, const std::vector<uint8_t>& labels,
                           const std::vector<uint8_t>& pixels) {
  const uint64_t per = shape.pixels();
  CADRE_CHECK(per > 0 && pixels.size() == labels.size() * per, "image shard '", path, "': ", pixels.size(),
              " pixel bytes for ", labels.size(), " images of ", per);
  std::string records;
  records.reserve(labels.size() * (per + 1));
  for (size_t i = 0; i < labels.size(); ++i) {
    records.push_back(static_cast<char>(labels[i]));
    records.append(reinterpret_cast<const char*>(pixels.data() + i * per), per);
  }
  ImageShardHeader header{};
  std::memcpy(header.magic, kImageShardMagic, sizeof kImageShardMagic);
  header.version = kImageShardVersion;
  header.channels = shape.channels;
  header.height = shape.height;
  header.width = shape.width;
  header.count = labels.size();
  header.checksum = fnv1a64(records.data(), records.size());
  file_write_atomic(path, std::string(reinterpret_cast<const char*>(&header), sizeof header) + records);
  return header.checksum;
}

ImageShardReader::ImageShardReader(const std::string& path, bool verify) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  CADRE_CHECK(fd >= 0, "cannot open image shard '", path, "': ", std::strerror(errno));
  struct stat st{};
  ::fstat(fd, &st);
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ < sizeof(ImageShardHeader)) {
    ::close(fd);
    throw Error(str("image shard '", path, "' is truncated: ", map_size_, " bytes, header needs 64"));
  }
  void* m = ::mmap(nullptr, map_size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  CADRE_CHECK(m != MAP_FAILED, "cannot mmap '", path, "': ", std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  std::memcpy(&header_, map_, sizeof header_);
  auto fail = [&](const std::string& why) {
    ::munmap(const_cast<uint8_t*>(map_), map_size_);
    map_ = nullptr;
    throw Error(str("image shard '", path, "': ", why));
  };
  if (std::memcmp(header_.magic, kImageShardMagic, sizeof kImageShardMagic) != 0) fail("bad magic (not a Cadre image shard)");
  if (header_.version != kImageShardVersion) fail(str("unsupported version ", header_.version));
  const uint64_t per = shape().pixels();
  // Bounded so the size arithmetic below cannot overflow: images of at most 2^32 bytes.
  if (per == 0 || per > (uint64_t{1} << 32)) fail(str("bad image shape ", header_.channels, "x", header_.height, "x", header_.width));
  if (header_.count > (map_size_ - sizeof(ImageShardHeader)) / (per + 1) + 1 ||
      sizeof(ImageShardHeader) + header_.count * (per + 1) != map_size_)
    fail(str("size ", map_size_, " bytes does not hold ", header_.count, " records of ", per + 1, " (truncated or corrupt)"));
  if (verify && fnv1a64(map_ + sizeof(ImageShardHeader), map_size_ - sizeof(ImageShardHeader)) != header_.checksum)
    fail("checksum mismatch (file corrupted)");
}

ImageShardReader::ImageShardReader(ImageShardReader&& o) noexcept
    : path_(std::move(o.path_)), header_(o.header_), map_(o.map_), map_size_(o.map_size_) {
  o.map_ = nullptr;
}

ImageShardReader::~ImageShardReader() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

uint8_t ImageShardReader::read(uint64_t i, uint8_t* pixels) const {
  CADRE_CHECK(i < header_.count, "image ", i, " is past the end of '", path_, "' (", header_.count, " images)");
  const uint64_t per = shape().pixels();
  const uint8_t* record = map_ + sizeof(ImageShardHeader) + i * (per + 1);
  std::memcpy(pixels, record + 1, per);
  return record[0];
}

}  // namespace cadre
