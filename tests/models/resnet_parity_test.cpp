// Parity with torchvision: the same weights, buffers and batch through Cadre's ResNet and
// torchvision's (PyPI's torchvision in the project venv, CADRE_VENV_PYTHON; its own blocks and
// forward) give the same
// logits, loss, parameter gradients and BatchNorm statistics in train mode, and the same logits
// in eval mode, for basic blocks with the small stem and bottlenecks with the ImageNet stem.
//
// Judged against float64 (fp64_judge.h says why), not with a fixed tolerance between the two
// float32 sides: both call ATen's kernels, but which ones (oneDNN's convolutions, OpenBLAS,
// ATen's vectorised reductions) and so the summation order depend on the CPU's instruction
// set. The Python side also runs the same weights, buffers and images in float64, and for
// every tensor Cadre's float32 error must be at most kFactor = 4 times PyTorch's float32 error
// (the largest over its runs from the given inputs and from inputs moved by one ulp), floored
// at kFloor = 4 float32 unit roundoffs of the tensor's magnitude. A gradient's magnitude is its
// condition magnitude (the Python side computes, in float64, the same sums over the batch with
// every term's absolute value): BatchNorm bias gradients cancel to near zero, and a correct
// float32 sum in another order errs by a few roundoffs of the terms, not of the result; a wrong stride, padding,
// BatchNorm momentum or residual path moves results by 1e-3 of the magnitude and more, 1e3x
// past the bound. Each group's worst ratio and errors are printed.
#include <c10/core/GradMode.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <nlohmann/json.hpp>

#include "ckpt/tensor_file.h"
#include "core/config.h"
#include "models/registry.h"
#include "models/resnet/resnet_model.h"
#include "support/process.h"
#include "fp64_judge.h"

namespace {

void run_parity(const std::string& model_yaml, int64_t channels, int64_t size, const std::string& tag) {
  cadre::test::TempDir dir("resnet-parity-" + tag);
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
  auto py = cadre::test::run_process({CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/resnet_parity.py", dir.path()});
  ASSERT_EQ(py.exit_code, 0) << py.output;
  ASSERT_NE(py.output.find("ok: torchvision"), std::string::npos) << py.output;
  std::printf("[resnet parity] %s %s", tag.c_str(), py.output.substr(py.output.find("ok:")).c_str());
  cadre::TensorDict want = cadre::tensor_file_load(dir / "outputs.pt");
  // PyTorch's float32 runs: from the given inputs and from inputs moved by one ulp (the Python side says why).
  ASSERT_GE(want.at("ulp_runs").item<int64_t>(), 1);
  auto torch32 = [&](const std::string& key) { return cadre::test::torch32_runs(want, key); };
  cadre::test::Fp64Judge judge("[resnet parity] " + tag);
  auto check = [&](const std::string& group, const std::string& name, const at::Tensor& got, const std::string& key) {
    ASSERT_TRUE(want.count(key) && want.count("ref." + key)) << "torchvision has no " << key;
    const auto condition = want.find("cond." + key);
    judge.check(group, name, got, torch32(key), want.at("ref." + key),
                condition == want.end() ? at::Tensor() : condition->second);
  };

  net.train(true);
  at::Tensor logits = net.forward(images);
  cadre::LossOutput loss = model.loss({images, labels});  // the trainer's path, a second forward
  check("train-mode logits", "logits", logits, "logits");
  check("loss", "loss", loss.loss, "loss");
  EXPECT_EQ(loss.correct.item<int64_t>(), logits.argmax(1).eq(labels).sum().item<int64_t>());
  loss.loss.backward();
  int compared = 0;
  for (const auto& p : net.named_parameters()) {
    ASSERT_TRUE(want.count("cond.grad." + p.key())) << "no condition magnitudes for " << p.key() << "'s gradient";
    check("gradients", p.key(), p.value().grad(), "grad." + p.key());
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(net.named_parameters().size()));
  {
    // Restart from the original buffers and run one train-mode forward to compare statistics.
    c10::NoGradGuard no_grad;
    for (auto& b : net.named_buffers()) b.value().copy_(inputs.at("buffer." + b.key()));
    net.forward(images);
  }
  for (const auto& b : net.named_buffers()) check("BatchNorm statistics", b.key(), b.value(), "after." + b.key());
  {
    // Back to the statistics Python's float32 run evaluated with, then eval mode.
    c10::NoGradGuard no_grad;
    for (auto& b : net.named_buffers()) b.value().copy_(want.at("after." + b.key()));
    net.train(false);
    check("eval-mode logits", "eval_logits", net.forward(images), "eval_logits");
  }
  judge.print();
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
