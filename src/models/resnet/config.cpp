// ResNet's config keys.
#include "models/resnet/config.h"

#include "core/error.h"

namespace cadre {
namespace {

std::vector<Field> resnet_fields(ResnetConfig& m) {
  return {
      {"model.depth", &m.depth},
      {"model.width", &m.width},
      {"model.in_channels", &m.in_channels},
      {"model.num_classes", &m.num_classes},
      {"model.image_size", &m.image_size},
      {"model.stem", &m.stem},
      {"model.zero_init_residual", &m.zero_init_residual},
      {"model.channels_last", &m.channels_last},
      {"model.label_smoothing", &m.label_smoothing},
  };
}

}  // namespace

std::vector<int64_t> resnet_stage_blocks(int64_t depth) {
  switch (depth) {
    case 18: return {2, 2, 2, 2};
    case 34: return {3, 4, 6, 3};
    case 50: return {3, 4, 6, 3};
    case 101: return {3, 4, 23, 3};
    case 152: return {3, 8, 36, 3};
  }
  throw ConfigError(str("model.depth: ResNet-", depth, " is not defined (18, 34, 50, 101, 152)"));
}

bool resnet_bottleneck(int64_t depth) { return depth >= 50; }

ResnetConfig resnet_config(const ModelSection& section) {
  ResnetConfig m;
  fields_apply(resnet_fields(m), section.keys);
  resnet_stage_blocks(m.depth);
  CADRE_CONFIG_CHECK(m.width > 0, "model.width must be positive, got ", m.width);
  CADRE_CONFIG_CHECK(m.in_channels > 0, "model.in_channels must be positive, got ", m.in_channels);
  CADRE_CONFIG_CHECK(m.num_classes > 1, "model.num_classes must be at least 2, got ", m.num_classes);
  CADRE_CONFIG_CHECK(m.label_smoothing >= 0 && m.label_smoothing <= 1, "model.label_smoothing must be in [0, 1], got ",
                     m.label_smoothing);
  CADRE_CONFIG_CHECK(m.stem == "imagenet" || m.stem == "small", "model.stem: unknown '", m.stem, "' (imagenet, small)");
  // Four stages halve the resolution three times after the stem (which quarters it for imagenet).
  const int64_t min_size = m.stem == "imagenet" ? 32 : 8;
  CADRE_CONFIG_CHECK(m.image_size >= min_size, "model.image_size ", m.image_size, " is too small for the ", m.stem,
                     " stem (at least ", min_size, ")");
  return m;
}

std::vector<RawKey> resnet_config_keys(const ResnetConfig& config) {
  ResnetConfig copy = config;
  return fields_dump(resnet_fields(copy), "resolved");
}

}  // namespace cadre
