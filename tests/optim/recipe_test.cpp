// configs/resnet50_imagefolder.yaml (issue 28's ResNet-50 recipe) as the trainer reads it: it
// loads and validates, its model builds, and one SGD step at a 32x32 image size (the recipe's
// 224 costs seconds per step on 2 cores) trains with label smoothing, Nesterov momentum and
// weight decay on convolution and linear weights only (the schedule's warmup checked too).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "core/config.h"
#include "models/registry.h"
#include "optim/lr_schedule.h"
#include "optim/make_optimizer.h"
#include "optim/sgd.h"

namespace {

TEST(Resnet50Recipe, BuildsAndTakesOneSgdStepAtATinyImageSize) {
  cadre::Config c = cadre::config_load(CADRE_SOURCE_DIR "/configs/resnet50_imagefolder.yaml",
                                       {"model.image_size=32", "data.batch_size=2"});
  cadre::model_config_resolve(c);
  std::unique_ptr<cadre::Model> model = cadre::model_build(c);
  model->init_weights(static_cast<uint64_t>(c.train.seed));
  EXPECT_NEAR(double(model->param_count()), 25.557032e6, 1.0);  // torchvision's resnet50: 25,557,032

  std::vector<at::Tensor> params;
  std::vector<bool> decay;
  std::vector<at::Tensor> before;
  for (auto& p : model->module().parameters()) {
    params.push_back(p);
    decay.push_back(p.dim() >= 2);  // what FSDPModule::decay_mask gives the trainer
    before.push_back(p.detach().clone());
  }
  auto optimizer = cadre::make_optimizer(c.optim, params, decay);
  auto* sgd = dynamic_cast<cadre::Sgd*>(optimizer.get());
  ASSERT_NE(sgd, nullptr) << "optim.name sgd built another optimizer";

  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  at::Tensor images = at::randn({2, 3, 32, 32}, gen), labels = at::randint(1000, {2}, gen, at::kLong);
  model->module().train(true);
  at::Tensor loss = model->loss({images, labels}).loss;
  // Near log(1000) = 6.9 at initialisation; smoothing only adds the uniform part's cross-entropy.
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  EXPECT_GT(loss.item<double>(), 5.0);
  loss.backward();

  const cadre::LrSchedule schedule{c.optim.lr, c.optim.min_lr, c.optim.warmup_steps, c.train.steps};
  EXPECT_DOUBLE_EQ(schedule.at(0), 0.1 / 25025);  // linear warmup from lr / warmup_steps
  EXPECT_DOUBLE_EQ(schedule.at(25024), 0.1);      // the peak at the end of warmup
  // Stepped at the peak: at the first step's 4e-6 the weight decay term (lr * wd * p) would
  // be below float32 rounding of p, and decay on the wrong parameters could not show.
  optimizer->step(c.optim.lr);
  EXPECT_EQ(optimizer->steps(), 1);

  // On the first step the buffer is the (decayed) gradient and Nesterov adds momentum times it:
  // p moves by lr * (1 + momentum) * (g + wd * p), with wd only where decay is set. Each side
  // rounds 3 to 4 times (in its own order, with or without FMA), each rounding at most one
  // float32 unit roundoff of the operands, at most |p| + |move|: 8 of them bound the difference
  // per element. (At 32x32 the last stage's BatchNorm normalises over 2 samples of 1x1, so some
  // gradients reach 1e5 and moves exceed the parameters: the bound has to scale with the move.)
  const double lr = c.optim.lr, m = c.optim.momentum, wd = c.optim.weight_decay;
  constexpr double kUnitRoundoff = 0x1p-24;
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor g = params[i].grad().to(at::kDouble), p0 = before[i].to(at::kDouble);
    at::Tensor move = -lr * (1 + m) * (g + (decay[i] ? wd : 0.0) * p0);
    at::Tensor bound = 8 * kUnitRoundoff * (p0.abs() + move.abs());
    at::Tensor excess = (params[i].to(at::kDouble) - (p0 + move)).abs() - bound;
    ASSERT_LE(excess.max().item<double>(), 0.0)
        << "parameter " << i << " shape " << params[i].sizes() << " decay " << decay[i] << ": largest move "
        << move.abs().max().item<double>();
    ASSERT_GT(move.abs().max().item<double>(), 0.0) << "parameter " << i << " did not move";
  }
}

}  // namespace
