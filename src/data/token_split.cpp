// Writing token splits as shard files.
#include "data/token_split.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "data/token_shard.h"

namespace cadre {

uint32_t label_bytes(int64_t vocab_size) { return vocab_size <= 0xFFFF - 2 ? 2 : 4; }

LabelCodes label_codes(uint32_t label_bytes) {
  const uint32_t top = label_bytes == 2 ? 0xFFFFu : 0xFFFFFFFFu;
  return {top - 1, top, top - 2};
}

std::vector<ShardEntry> token_split_write(const std::string& dir, const std::string& name, const uint32_t* values,
                                          uint64_t samples, uint64_t per, uint64_t shard_samples, uint32_t bytes) {
  std::vector<ShardEntry> entries;
  for (uint64_t s = 0, index = 0; s < samples; s += shard_samples, ++index) {
    const uint64_t n = std::min<uint64_t>(shard_samples, samples - s);
    const std::vector<uint32_t> chunk(values + s * per, values + (s + n) * per);
    char file[96];
    std::snprintf(file, sizeof file, "%s_%05llu.bin", name.c_str(), static_cast<unsigned long long>(index));
    const uint64_t checksum = shard_write(dir + "/" + file, chunk, bytes);
    entries.push_back({file, n, checksum});
  }
  return entries;
}

}  // namespace cadre
