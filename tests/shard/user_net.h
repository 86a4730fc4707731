// A network as a user of Cadre would write it: libtorch's own modules (Linear, LayerNorm,
// BatchNorm1d, Sequential, ModuleList, ModuleDict), a custom forward, nested modules, a
// parameter shared by two modules, a constant buffer, BatchNorm's running statistics and a
// frozen parameter. The only Cadre-specific thing in it is cadre::call at unit boundaries.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/modules/activation.h>

#include "shard/module_hooks.h"

namespace usernet {

constexpr int64_t kIn = 12, kDim = 16, kClasses = 5;

struct Block : torch::nn::Module {
  explicit Block(int64_t dim) {
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc1 = register_module("fc1", torch::nn::Linear(dim, 2 * dim));
    fc2 = register_module("fc2", torch::nn::Linear(2 * dim, dim));
  }
  at::Tensor forward(const at::Tensor& x) { return x + fc2(at::gelu(fc1(norm(x)))); }
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

// Registers another module's weight as its own: one tensor, two names.
struct Shared : torch::nn::Module {
  explicit Shared(const at::Tensor& w) { weight = register_parameter("weight", w); }
  at::Tensor forward(const at::Tensor& x) { return at::linear(x, weight); }
  at::Tensor weight;
};

struct Net : torch::nn::Module {
  Net() {
    embed = register_module("embed", torch::nn::Linear(kIn, kDim));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 3; ++i) blocks->push_back(std::make_shared<Block>(kDim));
    tail = register_module("tail", torch::nn::Sequential(torch::nn::Linear(kDim, kDim), torch::nn::ReLU(),
                                                         torch::nn::Linear(kDim, kDim)));
    mix = register_module("mix", torch::nn::Linear(kDim, kDim));
    shared = register_module("shared", std::make_shared<Shared>(mix->weight));
    bn = register_module("bn", torch::nn::BatchNorm1d(kDim));
    heads = register_module("heads", torch::nn::ModuleDict());
    heads->update({{"main", torch::nn::Linear(kDim, kClasses).ptr()}});
    scale = register_buffer("scale", at::full({kDim}, 0.5));
    offset = register_parameter("offset", at::full({kDim}, 0.1), /*requires_grad=*/false);
  }

  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = embed(x);
    for (auto& b : *blocks) h = cadre::call(b->as<Block>(), h);
    h = cadre::call_sequential(tail, h);
    h = mix(h) * scale + shared->forward(h) + offset;
    return cadre::call(heads["main"]->as<torch::nn::Linear>(), bn(h));
  }

  // The units a user would choose: each block, the Sequential's first layer, the head.
  std::vector<torch::nn::Module*> units() {
    std::vector<torch::nn::Module*> out;
    for (auto& b : *blocks) out.push_back(b.get());
    out.push_back(tail->ptr(0).get());
    out.push_back(heads["main"].get());
    return out;
  }

  // Same values on every rank for a seed.
  void init(uint64_t seed) {
    c10::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    for (auto& p : parameters())
      if (p.requires_grad()) p.uniform_(-0.3, 0.3, gen);
  }

  torch::nn::Linear embed{nullptr}, mix{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::Sequential tail{nullptr};
  std::shared_ptr<Shared> shared;
  torch::nn::BatchNorm1d bn{nullptr};
  torch::nn::ModuleDict heads{nullptr};
  at::Tensor scale, offset;
};

// Batch `chunk` of step `step`: inputs [n, kIn] and their class labels [n], a fixed linear
// rule of the inputs, so there is something to learn.
inline std::pair<at::Tensor, at::Tensor> batch(int64_t step, int64_t chunk, int64_t n) {
  static const at::Tensor rule = at::randn({kIn, kClasses}, at::make_generator<at::CPUGeneratorImpl>(99));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(1000 * step + chunk + 1));
  at::Tensor x = at::randn({n, kIn}, gen);
  return {x, at::matmul(x, rule).argmax(1)};
}

}  // namespace usernet
