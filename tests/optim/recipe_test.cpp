// configs/resnet50_imagefolder.yaml (issue 28's ResNet-50 recipe) as the trainer reads it: it
// loads and validates, its model builds, and one SGD step at a 32x32 image size (the recipe's
// 224 costs seconds per step on 2 cores) trains with label smoothing, Nesterov momentum and
// weight decay on convolution and linear weights only, at the schedule's first learning rate.
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
  optimizer->step(schedule.at(0));
  EXPECT_EQ(optimizer->steps(), 1);

  // On the first step the buffer is the (decayed) gradient and Nesterov adds momentum times it:
  // p moves by lr * (1 + momentum) * (g + wd * p), with wd only where decay is set.
  const double lr = schedule.at(0), m = c.optim.momentum, wd = c.optim.weight_decay;
  c10::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    at::Tensor g = params[i].grad();
    at::Tensor expected = before[i] - lr * (1 + m) * (g + (decay[i] ? wd : 0.0) * before[i]);
    ASSERT_TRUE(at::allclose(params[i], expected, 1e-5, 1e-7)) << "parameter " << i << " shape " << params[i].sizes();
  }
}

}  // namespace
