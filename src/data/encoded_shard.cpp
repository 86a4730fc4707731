// Encoded image shard reading and writing.
#include "data/encoded_shard.h"

#include <cstring>

#include "core/error.h"
#include "core/file_util.h"
#include "data/token_shard.h"

namespace cadre {

uint64_t encoded_shard_write(const std::string& path, const std::vector<EncodedImage>& images) {
  std::vector<EncodedIndexEntry> index;
  uint64_t offset = sizeof(EncodedShardHeader) + images.size() * sizeof(EncodedIndexEntry);
  for (const auto& im : images) {
    CADRE_CHECK(im.bytes.size() < (uint64_t{1} << 32), "encoded shard '", path, "': an image of ", im.bytes.size(), " bytes");
    index.push_back({offset, static_cast<uint32_t>(im.bytes.size()), im.label, im.height, im.width});
    offset += im.bytes.size();
  }
  std::string body(reinterpret_cast<const char*>(index.data()), index.size() * sizeof(EncodedIndexEntry));
  body.reserve(offset);
  for (const auto& im : images) body += im.bytes;
  EncodedShardHeader header{};
  std::memcpy(header.magic, kEncodedShardMagic, sizeof kEncodedShardMagic);
  header.version = kEncodedShardVersion;
  header.count = images.size();
  header.checksum = fnv1a64(body.data(), body.size());
  file_write_atomic(path, std::string(reinterpret_cast<const char*>(&header), sizeof header) + body);
  return header.checksum;
}

EncodedShardReader::EncodedShardReader(const std::string& path, bool verify)
    : path_(path), file_(path, "encoded image shard", sizeof(EncodedShardHeader)) {
  std::memcpy(&header_, file_.data(), sizeof header_);
  auto fail = [&](const std::string& why) { throw Error(str("encoded image shard '", path, "': ", why)); };
  if (std::memcmp(header_.magic, kEncodedShardMagic, sizeof kEncodedShardMagic) != 0)
    fail("bad magic (not a Cadre encoded image shard)");
  if (header_.version != kEncodedShardVersion) fail(str("unsupported version ", header_.version));
  const uint64_t payload = file_.size() - sizeof(EncodedShardHeader);
  if (header_.count > payload / sizeof(EncodedIndexEntry)) fail(str("index of ", header_.count, " entries is past the end"));
  index_.resize(header_.count);
  std::memcpy(index_.data(), file_.data() + sizeof(EncodedShardHeader), header_.count * sizeof(EncodedIndexEntry));
  const uint64_t data_start = sizeof(EncodedShardHeader) + header_.count * sizeof(EncodedIndexEntry);
  for (uint64_t i = 0; i < header_.count; ++i) {
    const EncodedIndexEntry& e = index_[i];
    if (e.offset < data_start || e.offset > file_.size() || e.size > file_.size() - e.offset)
      fail(str("record ", i, " (", e.size, " bytes at ", e.offset, ") is outside the file of ", file_.size(),
               " bytes (truncated or corrupt)"));
  }
  if (verify && fnv1a64(file_.data() + sizeof(EncodedShardHeader), payload) != header_.checksum)
    fail("checksum mismatch (file corrupted)");
}

}  // namespace cadre
