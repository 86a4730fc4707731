// Packed token shards: a 64-byte header (magic, version, dtype, count, checksum) followed
// by `count` little-endian tokens of 2 or 4 bytes. Readers memory-map the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

constexpr char kShardMagic[8] = {'C', 'A', 'D', 'R', 'E', 'T', 'O', 'K'};
constexpr uint32_t kShardVersion = 1;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;   // 2 (uint16) or 4 (uint32)
  uint64_t count;         // number of tokens in the payload
  uint64_t checksum;      // FNV-1a 64 over the payload bytes
  uint8_t reserved[32];
};
static_assert(sizeof(ShardHeader) == 64, "shard header is 64 bytes on disk");

// FNV-1a 64-bit hash, continuing from `seed` so it can run over chunks.
uint64_t fnv1a64(const void* data, size_t size, uint64_t seed = 1469598103934665603ULL);

// Writes tokens atomically (temporary file, fsync, rename). Returns the payload checksum.
uint64_t shard_write(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t token_bytes);

// Read-only memory map of one shard. Opening validates header and size; `verify` also
// recomputes the checksum. Errors name the file.
class ShardReader {
 public:
  ShardReader(const std::string& path, bool verify);
  ~ShardReader();
  ShardReader(ShardReader&& other) noexcept;
  ShardReader& operator=(ShardReader&&) = delete;
  ShardReader(const ShardReader&) = delete;

  uint64_t size() const { return header_.count; }
  uint32_t token_bytes() const { return header_.token_bytes; }
  uint64_t checksum() const { return header_.checksum; }
  uint32_t token(uint64_t i) const;  // Error naming the file when i is past the end
  // Copies tokens [first, first+n) into out as int64 (Error when the range is past the end).
  void read(uint64_t first, uint64_t n, int64_t* out) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  ShardHeader header_{};
  const uint8_t* map_ = nullptr;
  size_t map_size_ = 0;
};

}  // namespace cadre
