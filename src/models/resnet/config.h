// The ResNet model's keys in the `model:` section (arch: resnet), with torchvision's defaults.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace cadre {

struct ResnetConfig {
  int64_t depth = 18;           // 18, 34 (basic blocks); 50, 101, 152 (bottleneck blocks)
  int64_t width = 64;           // channels of the first stage; stages double it
  int64_t in_channels = 3;
  int64_t num_classes = 1000;
  int64_t image_size = 224;     // input height and width
  // imagenet: 7x7 stride-2 convolution and a 3x3 stride-2 max pool (torchvision); small: one
  // 3x3 stride-1 convolution and no pool, for small images such as 28x28 digits.
  std::string stem = "imagenet";
  bool zero_init_residual = false;  // start each block's last BatchNorm scale at zero
  // Activations in channels-last (NHWC) memory from the stem on: oneDNN's convolutions take
  // NHWC directly, where NCHW costs a reorder in and out of every convolution (ResNet-18 on
  // MNIST: about 15% of a training step on the CPU). Parameters and gradients keep their layout.
  bool channels_last = true;
  // Of the training loss (models/classification_loss.h): 0 is plain cross-entropy; the
  // ImageNet recipes use 0.1. Validation loss is reported with the same smoothing.
  double label_smoothing = 0;
};

// Parses and validates the section's keys (ConfigError naming the key and its source).
ResnetConfig resnet_config(const ModelSection& section);
std::vector<RawKey> resnet_config_keys(const ResnetConfig& config);

// Blocks per stage and whether they are bottlenecks, from the depth.
std::vector<int64_t> resnet_stage_blocks(int64_t depth);
bool resnet_bottleneck(int64_t depth);

}  // namespace cadre
