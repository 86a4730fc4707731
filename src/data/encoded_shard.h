// Shards of encoded images (JPEG or PNG bytes as found in the folder): a 64-byte header (magic
// CADREENC, version, count, checksum), an index of `count` 24-byte entries (offset of the bytes
// from the file start, size, label, original height and width), then the bytes end to end. The
// index lets a reader plan decodes (crop boxes, DCT scale) without touching the image data.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/mapped_file.h"

namespace cadre {

constexpr char kEncodedShardMagic[8] = {'C', 'A', 'D', 'R', 'E', 'E', 'N', 'C'};
constexpr uint32_t kEncodedShardVersion = 1;

struct EncodedShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t reserved0;
  uint64_t count;     // records
  uint64_t checksum;  // FNV-1a 64 over the index and the bytes
  uint8_t reserved[32];
};
static_assert(sizeof(EncodedShardHeader) == 64, "encoded shard header is 64 bytes on disk");

struct EncodedIndexEntry {
  uint64_t offset;  // from the start of the file
  uint32_t size;
  uint32_t label;
  uint32_t height, width;  // the original image's
};
static_assert(sizeof(EncodedIndexEntry) == 24, "encoded shard index entries are 24 bytes on disk");

struct EncodedImage {
  uint32_t label = 0, height = 0, width = 0;
  std::string bytes;
};

// Writes the images atomically; returns the checksum.
uint64_t encoded_shard_write(const std::string& path, const std::vector<EncodedImage>& images);

// Read-only memory map of one encoded shard. Opening validates the header and every index
// entry against the file size; `verify` also the checksum. Errors name the file.
class EncodedShardReader {
 public:
  EncodedShardReader(const std::string& path, bool verify);

  uint64_t size() const { return header_.count; }
  uint64_t checksum() const { return header_.checksum; }
  const std::string& path() const { return path_; }
  const EncodedIndexEntry& entry(uint64_t i) const { return index_[i]; }
  const uint8_t* bytes(uint64_t i) const { return file_.data() + index_[i].offset; }

 private:
  std::string path_;
  MappedFile file_;
  EncodedShardHeader header_{};
  std::vector<EncodedIndexEntry> index_;
};

}  // namespace cadre
