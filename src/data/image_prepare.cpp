// Image dataset preparation: read the labelled images (IDX pairs or digit JSON), shuffle with
// the seed, split, shard.
#include "data/image_prepare.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "data/idx_images.h"
#include "data/image_folder_prepare.h"
#include "data/image_shard.h"
#include "data/permutation.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

struct Images {
  std::vector<uint8_t> labels, pixels;
};

// One <label>.json: {"data": [...]} with height*width values in [0, 1] per image.
void read_label_file(const std::string& path, uint8_t label, uint64_t per, Images& out) {
  std::ifstream in(path);
  CADRE_CONFIG_CHECK(in, "cannot read '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(str("'", path, "' is not valid JSON: ", e.what()));
  }
  CADRE_CONFIG_CHECK(j.is_object() && j.contains("data") && j["data"].is_array(), "'", path,
                     "': expected an object with a \"data\" array of pixel values");
  const auto& data = j["data"];
  CADRE_CONFIG_CHECK(!data.empty() && data.size() % per == 0, "'", path, "': ", data.size(),
                     " values are not a whole number of ", per, "-pixel images (check --height/--width)");
  for (size_t i = 0; i < data.size(); ++i) {
    CADRE_CONFIG_CHECK(data[i].is_number(), "'", path, "': value ", i, " is not a number");
    double v = data[i].get<double>();
    CADRE_CONFIG_CHECK(v >= 0 && v <= 1, "'", path, "': value ", i, " is ", v, ", outside [0, 1]");
    out.pixels.push_back(static_cast<uint8_t>(std::lround(v * 255.0)));
  }
  out.labels.insert(out.labels.end(), data.size() / per, label);
}

std::vector<ShardEntry> write_shards(const std::string& out, const std::string& split, ImageShape shape,
                                     const Images& all, const std::vector<uint64_t>& order, size_t begin, size_t end,
                                     int64_t shard_samples) {
  std::vector<ShardEntry> entries;
  const uint64_t per = shape.pixels();
  for (size_t start = begin; start < end; start += static_cast<size_t>(shard_samples)) {
    size_t stop = std::min(end, start + static_cast<size_t>(shard_samples));
    Images part;
    for (size_t i = start; i < stop; ++i) {
      part.labels.push_back(all.labels[order[i]]);
      part.pixels.insert(part.pixels.end(), all.pixels.begin() + order[i] * per, all.pixels.begin() + (order[i] + 1) * per);
    }
    char name[32];
    std::snprintf(name, sizeof name, "%s_%05zu.img", split.c_str(), entries.size());
    uint64_t sum = image_shard_write(out + "/" + name, shape, part.labels, part.pixels);
    entries.push_back({name, stop - start, sum});
  }
  return entries;
}

}  // namespace

DatasetManifest images_prepare(const ImagePrepareOptions& o) {
  CADRE_CONFIG_CHECK(!o.inputs.empty(), "--input is required (directories of IDX pairs or <label>.json files)");
  CADRE_CONFIG_CHECK(!o.out.empty(), "--out is required");
  CADRE_CONFIG_CHECK(o.height > 0 && o.width > 0 && o.height * o.width <= (1 << 24), "--height and --width must be positive");
  CADRE_CONFIG_CHECK(o.val_fraction > 0 && o.val_fraction < 1, "--val-fraction must be in (0, 1), got ", o.val_fraction);
  CADRE_CONFIG_CHECK(o.shard_samples > 0, "--shard-samples must be positive");
  if (o.inputs.size() == 1 && fs::is_directory(o.inputs[0]) && idx_pairs_in(o.inputs[0]).empty() &&
      is_image_folder(o.inputs[0]))
    return image_folder_prepare(o);
  const ImageShape shape{1, static_cast<uint32_t>(o.height), static_cast<uint32_t>(o.width)};
  Images all;
  for (const auto& dir : o.inputs) {
    CADRE_CONFIG_CHECK(fs::is_directory(dir), "--input '", dir, "' is not a directory");
    const auto pairs = idx_pairs_in(dir);
    for (const auto& pair : pairs) idx_read_pair(pair, shape.height, shape.width, all.labels, all.pixels);
    for (int label = 0; label < 256 && pairs.empty(); ++label) {
      std::string path = dir + "/" + std::to_string(label) + ".json";
      if (fs::is_regular_file(path)) read_label_file(path, static_cast<uint8_t>(label), shape.pixels(), all);
    }
  }
  CADRE_CONFIG_CHECK(!all.labels.empty(), "no images under ", o.inputs[0],
                     " (expected an IDX pair *images-idx3-ubyte + *labels-idx1-ubyte, or <label>.json files)");
  const int64_t classes = *std::max_element(all.labels.begin(), all.labels.end()) + 1;
  const uint64_t n = all.labels.size();
  std::vector<uint64_t> order = permutation(n, static_cast<uint64_t>(o.seed), 0);
  const size_t n_val = std::max<size_t>(1, static_cast<size_t>(std::llround(o.val_fraction * double(n))));
  CADRE_CONFIG_CHECK(n_val < n, "--val-fraction leaves no training images");

  // Normalisation from the training images only.
  double sum = 0, sq = 0;
  const uint64_t per = shape.pixels();
  for (size_t i = n_val; i < n; ++i)
    for (uint64_t k = 0; k < per; ++k) {
      double v = all.pixels[order[i] * per + k] / 255.0;
      sum += v;
      sq += v * v;
    }
  const double count = double(n - n_val) * double(per), mean = sum / count;

  fs::create_directories(o.out);
  DatasetManifest m;
  m.kind = "images";
  m.channels = shape.channels;
  m.height = shape.height;
  m.width = shape.width;
  m.num_classes = classes;
  m.pixel_mean = mean;
  m.pixel_std = std::sqrt(std::max(sq / count - mean * mean, 1e-12));
  m.val = write_shards(o.out, "val", shape, all, order, 0, n_val, o.shard_samples);
  m.train = write_shards(o.out, "train", shape, all, order, n_val, n, o.shard_samples);
  manifest_write(o.out, m);
  log::info(str("data: ", n, " images (", classes, " classes, ", o.height, "x", o.width, "): ", n - n_val, " train, ",
                n_val, " validation; pixel mean ", m.pixel_mean, ", std ", m.pixel_std));
  return m;
}

}  // namespace cadre
