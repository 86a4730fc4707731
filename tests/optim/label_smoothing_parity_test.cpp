// Parity of Cadre's classification loss (models/classification_loss.h) with
// torch.nn.functional.cross_entropy(..., label_smoothing=) in PyPI's torch (the project venv):
// the mean loss and its gradient with respect to the logits, for smoothing 0.1 (the ImageNet
// recipes) and 0.3, and for 0 as a control. ResNet's loss goes through it with
// model.label_smoothing.
//
// Judged against float64 as the other parity tests (models/fp64_judge.h): Cadre's float32 error
// at most 4x PyTorch's largest over 4 float32 runs, floored at 4 unit roundoffs of the
// magnitude. Both are a log-softmax and a mean over 1000 classes; a wrong smoothing weight
// (0.1 read as 0.11, or the true class's share left out) moves the loss by 1e-3 of its
// magnitude, 1000x past the bound.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/tensor_file.h"
#include "core/config.h"
#include "models/classification_loss.h"
#include "models/fp64_judge.h"
#include "models/registry.h"
#include "models/resnet/resnet_model.h"
#include "support/process.h"

namespace {

TEST(LabelSmoothingParity, LossAndGradientMatchTorchCrossEntropy) {
  at::set_num_threads(1);
  const std::vector<double> smoothings = {0.0, 0.1, 0.3};
  cadre::test::TempDir dir("label-smoothing");
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  std::vector<at::Tensor> losses, grads;
  std::vector<std::string> argv = {CADRE_VENV_PYTHON, CADRE_SOURCE_DIR "/tests/python/label_smoothing_parity.py"};
  for (size_t k = 0; k < smoothings.size(); ++k) {
    const std::string case_dir = dir / ("case" + std::to_string(k));
    std::filesystem::create_directories(case_dir);
    at::Tensor logits = at::randn({16, 1000}, gen) * 3.0;
    at::Tensor target = at::randint(1000, {16}, gen, at::kLong);
    cadre::tensor_file_save(case_dir + "/inputs.pt", {{"logits", logits}, {"target", target}});
    cadre::test::write_text(case_dir + "/case.json", nlohmann::json{{"label_smoothing", smoothings[k]}}.dump());
    at::Tensor x = logits.clone().requires_grad_(true);
    at::Tensor loss = cadre::classification_loss(x, target, smoothings[k]);
    loss.backward();
    losses.push_back(loss.detach());
    grads.push_back(x.grad());
    argv.push_back(case_dir);
  }
  auto py = cadre::test::run_process(argv);
  ASSERT_EQ(py.exit_code, 0) << py.output;
  ASSERT_NE(py.output.find("ok: torch.nn.functional.cross_entropy"), std::string::npos) << py.output;
  for (size_t k = 0; k < smoothings.size(); ++k) {
    cadre::TensorDict want = cadre::tensor_file_load(dir / ("case" + std::to_string(k) + "/outputs.pt"));
    cadre::test::Fp64Judge judge("[label smoothing parity] " + std::to_string(smoothings[k]));
    judge.check("loss", "loss", losses[k], cadre::test::torch32_runs(want, "loss"), want.at("ref.loss"));
    judge.check("grad", "d loss / d logits", grads[k], cadre::test::torch32_runs(want, "grad"), want.at("ref.grad"));
    judge.print();
  }
}

// model.label_smoothing reaches ResNet's training loss: the loss is classification_loss of the
// network's logits with that smoothing, and differs from the unsmoothed one.
TEST(LabelSmoothingParity, ResnetLossUsesModelLabelSmoothing) {
  cadre::Config config = cadre::config_parse(
      "model:\n  arch: resnet\n  depth: 18\n  width: 4\n  num_classes: 5\n  image_size: 16\n  stem: small\n"
      "  label_smoothing: 0.2\n",
      "ls.yaml", {});
  cadre::model_config_resolve(config);
  cadre::ResnetModel model(cadre::resnet_config(config.model));
  model.init_weights(1);
  model.net().eval();  // BatchNorm from its running statistics: two forwards give the same logits
  auto gen = at::make_generator<at::CPUGeneratorImpl>(9);
  at::Tensor images = at::randn({4, 3, 16, 16}, gen), labels = at::randint(5, {4}, gen, at::kLong);
  at::Tensor got = model.loss({images, labels}).loss;
  at::Tensor logits = model.net().forward(images);
  EXPECT_TRUE(at::allclose(got, cadre::classification_loss(logits, labels, 0.2), 0, 0));
  EXPECT_FALSE(at::allclose(got, cadre::classification_loss(logits, labels, 0.0)));
}

}  // namespace
