// Parity with torchvision: the same weights, buffers and batch through Cadre's ResNet and
// torchvision's (Debian's python3-torchvision 0.14, its own blocks and forward) give the same
// logits, loss, parameter gradients and BatchNorm statistics in train mode, and the same logits
// in eval mode, for basic blocks with the small stem and bottlenecks with the ImageNet stem.
//
// Tolerance: 1e-5 relative to the largest magnitude of each compared tensor. Both sides call
// the same ATen kernels (Debian builds libtorch and python3-torch from one source, 1.13.1) in
// float32, so differences come only from summation order inside kernels (~1e-6 of the
// magnitude over the few thousand terms of a convolution's reduction); a wrong stride, padding,
// BatchNorm momentum or residual path moves results by 1e-2 or more.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "ckpt/tensor_file.h"
#include "core/config.h"
#include "models/registry.h"
#include "models/resnet/resnet_model.h"
#include "support/process.h"

namespace {

constexpr double kTolerance = 1e-5;

double worst = 0;  // the largest relative error of the running case, printed at its end

double relative_error(const at::Tensor& got, const at::Tensor& want) {
  double scale = want.abs().max().item<double>();
  double diff = (got.to(at::kDouble) - want.to(at::kDouble)).abs().max().item<double>();
  double e = scale > 0 ? diff / scale : diff;
  worst = std::max(worst, e);
  return e;
}

void run_parity(const std::string& model_yaml, int64_t channels, int64_t size, const std::string& tag) {
  cadre::test::TempDir dir("resnet-parity-" + tag);
  worst = 0;
  at::set_num_threads(1);
  cadre::Config config = cadre::config_parse(model_yaml, tag + ".yaml", {});
  cadre::model_config_resolve(config);
  cadre::ResnetModel model(cadre::resnet_config(config.model));
  model.init_weights(11);
  cadre::ResNetImpl& net = model.net();
  {
    // Non-trivial BatchNorm statistics and affine parameters, so eval mode tests them.
    c10::NoGradGuard no_grad;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto& b : net.named_buffers())
      if (b.value().is_floating_point()) b.value().uniform_(0.5, 1.5, gen);
    for (auto& p : net.named_parameters())
      if (p.key().find("bn") != std::string::npos || p.key().find("downsample.1") != std::string::npos)
        p.value().uniform_(0.5, 1.5, gen);
  }
  auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
  at::Tensor images = at::randn({4, channels, size, size}, gen);
  at::Tensor labels = at::randint(10, {4}, gen, at::kLong);

  cadre::TensorDict inputs{{"images", images}, {"labels", labels}};
  for (const auto& p : net.named_parameters()) inputs["param." + p.key()] = p.value();
  for (const auto& b : net.named_buffers()) inputs["buffer." + b.key()] = b.value().clone();
  cadre::tensor_file_save(dir / "inputs.pt", inputs);
  const cadre::ResnetConfig rc = cadre::resnet_config(config.model);
  nlohmann::json c = {{"depth", rc.depth}, {"width", rc.width}, {"in_channels", rc.in_channels},
                      {"num_classes", rc.num_classes}, {"stem", rc.stem}};
  cadre::test::write_text(dir / "case.json", c.dump(2));
  auto py = cadre::test::run_process({"/usr/bin/python3", CADRE_SOURCE_DIR "/tests/python/resnet_parity.py", dir.path()});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  cadre::TensorDict want = cadre::tensor_file_load(dir / "outputs.pt");

  net.train(true);
  at::Tensor logits = net.forward(images);
  cadre::LossOutput loss = model.loss({images, labels});  // the trainer's path, a second forward
  EXPECT_LT(relative_error(logits, want.at("logits")), kTolerance) << "train-mode logits";
  EXPECT_LT(relative_error(loss.loss, want.at("loss")), kTolerance) << "loss";
  EXPECT_EQ(loss.correct, logits.argmax(1).eq(labels).sum().item<int64_t>());
  loss.loss.backward();
  int compared = 0;
  for (const auto& p : net.named_parameters()) {
    ASSERT_TRUE(want.count("grad." + p.key())) << "torchvision has no gradient for " << p.key();
    EXPECT_LT(relative_error(p.value().grad(), want.at("grad." + p.key())), kTolerance) << "grad of " << p.key();
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(net.named_parameters().size()));
  {
    // Restart from the original buffers and run one train-mode forward to compare statistics.
    c10::NoGradGuard no_grad;
    for (auto& b : net.named_buffers()) b.value().copy_(inputs.at("buffer." + b.key()));
    net.forward(images);
  }
  for (const auto& b : net.named_buffers())
    EXPECT_LT(relative_error(b.value().to(at::kDouble), want.at("after." + b.key()).to(at::kDouble)), kTolerance)
        << "BatchNorm statistic " << b.key();
  {
    // Back to the statistics Python evaluated with, then eval mode.
    c10::NoGradGuard no_grad;
    for (auto& b : net.named_buffers()) b.value().copy_(want.at("after." + b.key()));
    net.train(false);
    EXPECT_LT(relative_error(net.forward(images), want.at("eval_logits")), kTolerance) << "eval-mode logits";
  }
  std::cout << "[resnet parity] " << tag << ": largest relative error " << worst << " over " << compared
            << " gradients, logits, loss and statistics" << std::endl;
}

}  // namespace

TEST(ResnetParity, BasicBlocksSmallStemMatchTorchvision) {
  run_parity("model:\n  arch: resnet\n  depth: 18\n  width: 8\n  in_channels: 1\n  num_classes: 10\n"
             "  image_size: 28\n  stem: small\n",
             1, 28, "r18");
}

TEST(ResnetParity, BottlenecksImagenetStemMatchTorchvision) {
  run_parity("model:\n  arch: resnet\n  depth: 50\n  width: 8\n  in_channels: 3\n  num_classes: 10\n"
             "  image_size: 32\n  stem: imagenet\n",
             3, 32, "r50");
}
