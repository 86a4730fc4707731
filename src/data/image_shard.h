// Packed image shards: a 64-byte header (magic CADREIMG, version, image shape, count,
// checksum) followed by `count` records of one label byte and channels*height*width pixel
// bytes (channel-major). Readers memory-map the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

constexpr char kImageShardMagic[8] = {'C', 'A', 'D', 'R', 'E', 'I', 'M', 'G'};
constexpr uint32_t kImageShardVersion = 1;

struct ImageShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t channels, height, width;
  uint32_t reserved0;
  uint64_t count;     // records
  uint64_t checksum;  // FNV-1a 64 over the records
  uint8_t reserved[16];
};
static_assert(sizeof(ImageShardHeader) == 64, "image shard header is 64 bytes on disk");

struct ImageShape {
  uint32_t channels = 1, height = 0, width = 0;
  uint64_t pixels() const { return uint64_t{channels} * height * width; }
};

// Writes `labels.size()` records atomically; `pixels` holds them end to end. Returns the checksum.
uint64_t image_shard_write(const std::string& path, ImageShape shape, const std::vector<uint8_t>& labels,
                           const std::vector<uint8_t>& pixels);

// Read-only memory map of one image shard; opening validates the header and size, `verify`
// also the checksum. Errors name the file.
class ImageShardReader {
 public:
  ImageShardReader(const std::string& path, bool verify);
  ~ImageShardReader();
  ImageShardReader(ImageShardReader&& other) noexcept;
  ImageShardReader& operator=(ImageShardReader&&) = delete;
  ImageShardReader(const ImageShardReader&) = delete;

  uint64_t size() const { return header_.count; }
  ImageShape shape() const { return {header_.channels, header_.height, header_.width}; }
  uint64_t checksum() const { return header_.checksum; }
  // Record i: its label, and its pixels copied into `pixels` (shape().pixels() bytes).
  uint8_t read(uint64_t i, uint8_t* pixels) const;

 private:
  std::string path_;
  ImageShardHeader header_{};
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
};

}  // namespace cadre
