// Deterministic, resumable reader of packed image shards, with the token loader's position
// semantics (data/sample_order.h): the training split shuffled per epoch from the seed, the
// validation split in file order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/image_shard.h"
#include "data/manifest.h"
#include "data/sample_order.h"

namespace cadre {

class ImageLoader {
 public:
  // Opens <dir>/manifest.json (kind images) and memory-maps the split's shards, verifying checksums.
  ImageLoader(const std::string& dir, Split split, uint64_t seed);

  uint64_t num_samples() const { return total_; }
  ImageShape shape() const { return shape_; }
  const DatasetManifest& manifest() const { return manifest_; }

  // Consumes `global_samples` samples (one global micro-batch of every rank) and writes
  // samples [first, first + count) of them: `count` labels and count * shape().pixels() bytes.
  void next(uint64_t global_samples, uint64_t first, uint64_t count, uint8_t* labels, uint8_t* pixels);
  // Sample `index` in split order: its label, its pixels into `pixels`.
  uint8_t sample(uint64_t index, uint8_t* pixels) const;

  uint64_t position() const { return consumed_; }
  void set_position(uint64_t consumed) { consumed_ = consumed; }

 private:
  DatasetManifest manifest_;
  ImageShape shape_;
  std::vector<ImageShardReader> shards_;
  std::vector<uint64_t> shard_start_;
  uint64_t total_ = 0;
  uint64_t consumed_ = 0;
  std::unique_ptr<SampleOrder> order_;
};

}  // namespace cadre
