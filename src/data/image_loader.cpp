// Image loader implementation.
#include "data/image_loader.h"

#include <algorithm>

#include "core/error.h"

namespace cadre {

ImageLoader::ImageLoader(const std::string& dir, Split split, uint64_t seed) : manifest_(manifest_read(dir)) {
  CADRE_CONFIG_CHECK(manifest_.kind == "images", "dataset '", dir, "' holds ", manifest_.kind, ", not images");
  shape_ = {static_cast<uint32_t>(manifest_.channels), static_cast<uint32_t>(manifest_.height),
            static_cast<uint32_t>(manifest_.width)};
  for (const auto& e : split == Split::Train ? manifest_.train : manifest_.val) {
    std::string path = dir + "/" + e.file;
    ImageShardReader reader(path, /*verify=*/true);
    CADRE_CHECK(reader.checksum() == e.checksum, "image shard '", path, "' does not match the manifest's checksum");
    CADRE_CHECK(reader.size() == e.samples, "image shard '", path, "' holds ", reader.size(), " images; the manifest says ",
                e.samples);
    const ImageShape s = reader.shape();
    CADRE_CHECK(s.channels == shape_.channels && s.height == shape_.height && s.width == shape_.width, "image shard '",
                path, "' holds ", s.channels, "x", s.height, "x", s.width, " images; the manifest says ", shape_.channels,
                "x", shape_.height, "x", shape_.width);
    shard_start_.push_back(total_);
    total_ += e.samples;
    shards_.push_back(std::move(reader));
  }
  CADRE_CHECK(total_ > 0, "dataset '", dir, "' has no ", split == Split::Train ? "train" : "val", " images");
  order_ = std::make_unique<SampleOrder>(total_, seed, split);
}

uint8_t ImageLoader::sample(uint64_t index, uint8_t* pixels) const {
  CADRE_CHECK(index < total_, "image ", index, " out of range (", total_, " images)");
  size_t s = std::upper_bound(shard_start_.begin(), shard_start_.end(), index) - shard_start_.begin() - 1;
  return shards_[s].read(index - shard_start_[s], pixels);
}

void ImageLoader::next(uint64_t global_samples, uint64_t first, uint64_t count, uint8_t* labels, uint8_t* pixels) {
  CADRE_CHECK(first + count <= global_samples, "loader slice [", first, ", ", first + count,
              ") is outside the global batch of ", global_samples);
  const uint64_t per = shape_.pixels();
  for (uint64_t i = 0; i < count; ++i) labels[i] = sample(order_->at(consumed_ + first + i), pixels + i * per);
  consumed_ += global_samples;
}

}  // namespace cadre
