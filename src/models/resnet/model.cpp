// ResNet on libtorch modules.
#include "models/resnet/model.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "core/error.h"
#include "models/fused_batch_norm_relu.h"
#include "shard/module_hooks.h"

namespace cadre {
namespace {

torch::nn::Conv2d conv(int64_t in, int64_t out, int64_t kernel, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, kernel).stride(stride).padding(kernel / 2).bias(false));
}

torch::nn::Sequential downsample_if_needed(int64_t in, int64_t out, int64_t stride) {
  if (stride == 1 && in == out) return nullptr;
  return torch::nn::Sequential(conv(in, out, 1, stride), torch::nn::BatchNorm2d(out));
}

template <typename Block>
torch::nn::Sequential make_stage(int64_t& in, int64_t planes, int64_t blocks, int64_t stride) {
  torch::nn::Sequential stage;
  for (int64_t i = 0; i < blocks; ++i) {
    stage->push_back(std::make_shared<Block>(in, planes, i == 0 ? stride : 1));
    in = planes * Block::kExpansion;
  }
  return stage;
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(in, planes, 3, stride));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, 1));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  if (auto d = downsample_if_needed(in, planes, stride)) downsample = register_module("downsample", d);
}

at::Tensor BasicBlockImpl::forward(const at::Tensor& x) {
  at::Tensor out = conv2->forward(batch_norm_relu(*bn1, conv1->forward(x)));
  return batch_norm_relu(*bn2, out, downsample ? downsample->forward(x) : x);
}

BottleneckImpl::BottleneckImpl(int64_t in, int64_t planes, int64_t stride) {
  conv1 = register_module("conv1", conv(in, planes, 1, 1));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(planes));
  conv2 = register_module("conv2", conv(planes, planes, 3, stride));
  bn2 = register_module("bn2", torch::nn::BatchNorm2d(planes));
  conv3 = register_module("conv3", conv(planes, planes * kExpansion, 1, 1));
  bn3 = register_module("bn3", torch::nn::BatchNorm2d(planes * kExpansion));
  if (auto d = downsample_if_needed(in, planes * kExpansion, stride)) downsample = register_module("downsample", d);
}

at::Tensor BottleneckImpl::forward(const at::Tensor& x) {
  at::Tensor out = batch_norm_relu(*bn1, conv1->forward(x));
  out = conv3->forward(batch_norm_relu(*bn2, conv2->forward(out)));
  return batch_norm_relu(*bn3, out, downsample ? downsample->forward(x) : x);
}

ResNetImpl::ResNetImpl(const ResnetConfig& c) : config_(c) {
  const bool small = c.stem == "small";
  conv1 = register_module("conv1", conv(c.in_channels, c.width, small ? 3 : 7, small ? 1 : 2));
  bn1 = register_module("bn1", torch::nn::BatchNorm2d(c.width));
  const auto blocks = resnet_stage_blocks(c.depth);
  int64_t in = c.width;
  torch::nn::Sequential* stages[] = {&layer1, &layer2, &layer3, &layer4};
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = c.width << s, stride = s == 0 ? 1 : 2;
    *stages[s] = resnet_bottleneck(c.depth) ? make_stage<BottleneckImpl>(in, planes, blocks[s], stride)
                                            : make_stage<BasicBlockImpl>(in, planes, blocks[s], stride);
    register_module("layer" + std::to_string(s + 1), *stages[s]);
  }
  fc = register_module("fc", torch::nn::Linear(in, c.num_classes));
}

at::Tensor ResNetImpl::forward(const at::Tensor& images) {
  CADRE_CHECK(images.dim() == 4 && images.size(1) == config_.in_channels, "ResNet.forward: expected images [B, ",
              config_.in_channels, ", H, W], got ", images.sizes());
  at::Tensor x = conv1->forward(images);
  // After the stem: its input's layout is ambiguous when in_channels is 1, its output's is not.
  if (config_.channels_last) x = x.contiguous(at::MemoryFormat::ChannelsLast);
  x = batch_norm_relu(*bn1, x);
  if (config_.stem == "imagenet") x = at::max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  for (auto* stage : {&layer1, &layer2, &layer3, &layer4}) x = call_sequential(*stage, x);
  x = at::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  return fc->forward(x);
}

std::vector<torch::nn::Module*> ResNetImpl::blocks() {
  std::vector<torch::nn::Module*> out;
  for (auto* stage : {&layer1, &layer2, &layer3, &layer4})
    for (const auto& block : (*stage)->children()) out.push_back(block.get());
  return out;
}

void ResNetImpl::init_weights(uint64_t seed) {
  c10::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (const auto& m : modules(/*include_self=*/false)) {
    if (auto* c = m->as<torch::nn::Conv2d>()) {
      // Kaiming normal, fan out, ReLU gain: std = sqrt(2 / (out_channels * kh * kw)).
      const auto& w = c->weight;
      const double fan_out = double(w.size(0) * w.size(2) * w.size(3));
      c->weight.normal_(0.0, std::sqrt(2.0 / fan_out), gen);
    } else if (auto* bn = m->as<torch::nn::BatchNorm2d>()) {
      bn->weight.fill_(1.0);
      bn->bias.zero_();
    } else if (auto* l = m->as<torch::nn::Linear>()) {
      const double bound = 1.0 / std::sqrt(double(l->weight.size(1)));
      l->weight.uniform_(-bound, bound, gen);
      l->bias.uniform_(-bound, bound, gen);
    }
  }
  if (config_.zero_init_residual)
    for (torch::nn::Module* block : blocks()) {
      if (auto* b = dynamic_cast<BottleneckImpl*>(block)) b->bn3->weight.zero_();
      if (auto* b = dynamic_cast<BasicBlockImpl*>(block)) b->bn2->weight.zero_();
    }
}

double resnet_flops_per_image(const ResnetConfig& c) {
  double macs = 0;
  int64_t size = c.image_size;
  auto conv_macs = [&](int64_t in, int64_t out, int64_t kernel, int64_t stride) {
    size = (size + 2 * (kernel / 2) - kernel) / stride + 1;
    macs += double(in) * out * kernel * kernel * size * size;
  };
  const bool small = c.stem == "small";
  conv_macs(c.in_channels, c.width, small ? 3 : 7, small ? 1 : 2);
  if (!small) size = (size + 2 - 3) / 2 + 1;  // max pool
  const auto blocks = resnet_stage_blocks(c.depth);
  const bool bottleneck = resnet_bottleneck(c.depth);
  const int64_t expansion = bottleneck ? 4 : 1;
  int64_t in = c.width;
  for (int s = 0; s < 4; ++s) {
    const int64_t planes = c.width << s;
    for (int64_t b = 0; b < blocks[s]; ++b) {
      const int64_t stride = b == 0 && s > 0 ? 2 : 1;
      if (bottleneck) {
        conv_macs(in, planes, 1, 1);
        conv_macs(planes, planes, 3, stride);
        conv_macs(planes, planes * 4, 1, 1);
      } else {
        conv_macs(in, planes, 3, stride);
        conv_macs(planes, planes, 3, 1);
      }
      if (stride != 1 || in != planes * expansion) macs += double(in) * planes * expansion * size * size;  // 1x1 downsample
      in = planes * expansion;
    }
  }
  macs += double(in) * c.num_classes;
  return 3.0 * 2.0 * macs;
}

}  // namespace cadre
