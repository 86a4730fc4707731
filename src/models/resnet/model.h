// ResNet (He et al.) as a libtorch module with torchvision's structure and parameter names
// (conv1, bn1, layer1.0.conv1, layer1.0.downsample.0, fc, ...), so a state dict moves between
// Cadre and torchvision unchanged: basic blocks for ResNet-18/34, bottlenecks for 50 and up,
// BatchNorm with running statistics, configurable width, input channels and stem. Each stage
// is a torch::nn::Sequential of blocks run through cadre::call_sequential, so FSDP units and
// activation checkpointing act around each block.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include <vector>

#include "models/resnet/config.h"

namespace cadre {

// Two 3x3 convolutions (ResNet-18/34).
class BasicBlockImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlockImpl(int64_t in, int64_t planes, int64_t stride);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Sequential downsample{nullptr};  // 1x1 convolution + BatchNorm when the shape changes
};

// 1x1 reduce, 3x3 (carrying the stride, as torchvision's ResNet v1.5), 1x1 expand by 4.
class BottleneckImpl : public torch::nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;
  BottleneckImpl(int64_t in, int64_t planes, int64_t stride);
  at::Tensor forward(const at::Tensor& x);
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential downsample{nullptr};
};

class ResNetImpl : public torch::nn::Module {
 public:
  explicit ResNetImpl(const ResnetConfig& config);
  // images [B, C, H, W] float32 -> logits [B, num_classes].
  at::Tensor forward(const at::Tensor& images);
  // torchvision's initialisation from a seed: Kaiming-normal convolutions (fan out), unit
  // BatchNorm scales, zero shifts, the classifier uniform in +-1/sqrt(fan in).
  void init_weights(uint64_t seed);
  // The blocks, stage by stage: the FSDP units.
  std::vector<torch::nn::Module*> blocks();

  torch::nn::Conv2d conv1{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr};
  torch::nn::Sequential layer1{nullptr}, layer2{nullptr}, layer3{nullptr}, layer4{nullptr};
  torch::nn::Linear fc{nullptr};

 private:
  ResnetConfig config_;
};

// Forward + backward FLOPs per image: 3x the forward's multiply-adds x 2 over convolutions and
// the classifier (BatchNorm, ReLU and pooling are not counted).
double resnet_flops_per_image(const ResnetConfig& config);

}  // namespace cadre
