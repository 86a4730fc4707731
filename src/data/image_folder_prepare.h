// `cadre data prepare --images` on an ImageFolder tree (root/<class>/<file>.jpg|jpeg|png,
// classes sorted by name, as torchvision's ImageFolder): every file is checked by decoding it
// (corrupt ones are listed and skipped, with a count), then the encoded bytes are written,
// in a seeded order, into shards of about --shard-mb each with an index (data/encoded_shard.h)
// and a seeded train/validation split.
#pragma once

#include <string>

#include "data/image_prepare.h"
#include "data/manifest.h"

namespace cadre {

// True when `dir` looks like an ImageFolder root: it holds sub-directories.
bool is_image_folder(const std::string& dir);

DatasetManifest image_folder_prepare(const ImagePrepareOptions& options);

}  // namespace cadre
