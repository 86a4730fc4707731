// Token loader implementation.
#include "data/loader.h"

#include <algorithm>

#include "core/error.h"

namespace cadre {

TokenLoader::TokenLoader(const std::string& dir, Split split, uint64_t seed)
    : manifest_(manifest_read(dir)) {
  CADRE_CONFIG_CHECK(manifest_.kind == "tokens", "dataset '", dir, "' holds ", manifest_.kind, ", not tokens");
  const auto& entries = split == Split::Train ? manifest_.train : manifest_.val;
  const uint64_t per = static_cast<uint64_t>(manifest_.seq_len + 1);
  for (const auto& e : entries) {
    std::string path = dir + "/" + e.file;
    ShardReader reader(path, /*verify=*/true);
    CADRE_CHECK(reader.checksum() == e.checksum, "shard '", path, "' does not match the manifest's checksum");
    CADRE_CHECK(reader.size() / per == e.samples && reader.size() % per == 0, "shard '", path, "' holds ",
                reader.size(), " tokens; the manifest says ", e.samples, " samples of ", per);
    shard_start_.push_back(total_);
    total_ += e.samples;
    shards_.push_back(std::move(reader));
  }
  CADRE_CHECK(total_ > 0, "dataset '", dir, "' has no ", split == Split::Train ? "train" : "val", " samples");
  order_ = std::make_unique<SampleOrder>(total_, seed, split);
}

void TokenLoader::sample(uint64_t index, int64_t* out) const {
  CADRE_CHECK(index < total_, "sample ", index, " out of range (", total_, " samples)");
  size_t s = std::upper_bound(shard_start_.begin(), shard_start_.end(), index) - shard_start_.begin() - 1;
  const uint64_t per = static_cast<uint64_t>(manifest_.seq_len + 1);
  shards_[s].read((index - shard_start_[s]) * per, per, out);
}

void TokenLoader::next(uint64_t global_samples, uint64_t first, uint64_t count, int64_t* out) {
  CADRE_CHECK(first + count <= global_samples, "loader slice [", first, ", ", first + count,
              ") is outside the global batch of ", global_samples);
  const uint64_t per = static_cast<uint64_t>(manifest_.seq_len + 1);
  for (uint64_t i = 0; i < count; ++i) sample(order_->at(consumed_ + first + i), out + i * per);
  consumed_ += global_samples;
}

}  // namespace cadre
