// Token shard reading and writing.
#include "data/token_shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/file_util.h"

namespace cadre {

uint64_t fnv1a64(const void* data, size_t size, uint64_t hash) {
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 1099511628211ULL;
  }
  return hash;
}

uint64_t shard_write(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t token_bytes) {
  CADRE_CHECK(token_bytes == 2 || token_bytes == 4, "shard '", path, "': token_bytes must be 2 or 4");
  std::vector<uint8_t> payload(tokens.size() * token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    uint32_t t = tokens[i];
    CADRE_CHECK(token_bytes == 4 || t <= 0xFFFF, "shard '", path, "': token ", t, " does not fit 16 bits");
    std::memcpy(payload.data() + i * token_bytes, &t, token_bytes);  // little-endian host
  }
  ShardHeader header{};
  std::memcpy(header.magic, kShardMagic, sizeof kShardMagic);
  header.version = kShardVersion;
  header.token_bytes = token_bytes;
  header.count = tokens.size();
  header.checksum = fnv1a64(payload.data(), payload.size());

  std::string bytes(reinterpret_cast<const char*>(&header), sizeof header);
  bytes.append(reinterpret_cast<const char*>(payload.data()), payload.size());
  file_write_atomic(path, bytes);
  return header.checksum;
}

ShardReader::ShardReader(const std::string& path, bool verify) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  CADRE_CHECK(fd >= 0, "cannot open token shard '", path, "': ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(str("cannot stat token shard '", path, "': ", std::strerror(err)));
  }
  map_size_ = static_cast<size_t>(st.st_size);
  if (map_size_ < sizeof(ShardHeader)) {
    ::close(fd);
    throw Error(str("token shard '", path, "' is truncated: ", map_size_, " bytes, header needs 64"));
  }
  void* m = ::mmap(nullptr, map_size_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  CADRE_CHECK(m != MAP_FAILED, "cannot mmap '", path, "': ", std::strerror(errno));
  map_ = static_cast<const uint8_t*>(m);
  std::memcpy(&header_, map_, sizeof header_);
  auto fail = [&](const std::string& why) {
    ::munmap(const_cast<uint8_t*>(map_), map_size_);
    map_ = nullptr;
    throw Error(str("token shard '", path, "': ", why));
  };
  if (std::memcmp(header_.magic, kShardMagic, sizeof kShardMagic) != 0) fail("bad magic (not a Cadre token shard)");
  if (header_.version != kShardVersion) fail(str("unsupported version ", header_.version));
  if (header_.token_bytes != 2 && header_.token_bytes != 4) fail(str("bad token size ", header_.token_bytes));
  // A damaged count can make `64 + count * token_bytes` wrap around to the file's size.
  const auto payload = checked_mul<uint64_t>(header_.count, header_.token_bytes);
  const auto expected = payload ? checked_add<uint64_t>(sizeof(ShardHeader), *payload) : std::nullopt;
  if (!expected) fail(str("header says ", header_.count, " tokens, more than any file holds (corrupt)"));
  if (*expected != map_size_) fail(str("size ", map_size_, " bytes, header says ", *expected, " (truncated or corrupt)"));
  if (verify) {
    uint64_t sum = fnv1a64(map_ + sizeof(ShardHeader), map_size_ - sizeof(ShardHeader));
    if (sum != header_.checksum) fail("checksum mismatch (file corrupted)");
  }
}

ShardReader::ShardReader(ShardReader&& o) noexcept
    : path_(std::move(o.path_)), header_(o.header_), map_(o.map_), map_size_(o.map_size_) {
  o.map_ = nullptr;
}

ShardReader::~ShardReader() {
  if (map_) ::munmap(const_cast<uint8_t*>(map_), map_size_);
}

uint32_t ShardReader::token(uint64_t i) const {
  CADRE_CHECK(i < header_.count, "token ", i, " is past the end of '", path_, "' (", header_.count, " tokens)");
  const uint8_t* p = map_ + sizeof(ShardHeader) + i * header_.token_bytes;
  if (header_.token_bytes == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

void ShardReader::read(uint64_t first, uint64_t n, int64_t* out) const {
  CADRE_CHECK(first <= header_.count && n <= header_.count - first, "tokens ", first, "..+", n, " are past the end of '",
              path_, "' (", header_.count, " tokens)");
  const uint8_t* p = map_ + sizeof(ShardHeader) + first * header_.token_bytes;
  if (header_.token_bytes == 2) {
    for (uint64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    }
  } else {
    for (uint64_t i = 0; i < n; ++i) {
      uint32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
    }
  }
}

}  // namespace cadre
