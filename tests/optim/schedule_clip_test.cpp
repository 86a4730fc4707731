// LR schedule shape and gradient clipping arithmetic.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"

TEST(LrSchedule, WarmupThenCosineToFloor) {
  cadre::LrSchedule s{1.0, 0.1, 10, 110};
  EXPECT_DOUBLE_EQ(s.at(0), 0.1);   // 1/10 of the peak on the first step
  EXPECT_DOUBLE_EQ(s.at(9), 1.0);   // peak at the end of warmup
  EXPECT_DOUBLE_EQ(s.at(10), 1.0);  // cosine starts at the peak
  EXPECT_NEAR(s.at(60), 0.55, 1e-12);  // halfway: midpoint of peak and floor
  EXPECT_NEAR(s.at(110), 0.1, 1e-12);
  EXPECT_NEAR(s.at(500), 0.1, 1e-12);  // stays at the floor past the end
  for (int64_t i = 10; i < 110; ++i) EXPECT_GE(s.at(i), s.at(i + 1));
}

TEST(GradClip, ScalesToMaxNormOnlyWhenAbove) {
  at::Tensor a = at::full({4}, 3.0), b = at::full({9}, 4.0 / 3.0);  // |a|^2 = 36, |b|^2 = 16
  std::vector<at::Tensor> grads{a, b};
  double norm = std::sqrt(cadre::grad_sq_norm(grads));
  EXPECT_NEAR(norm, std::sqrt(52.0), 1e-5);
  cadre::grad_clip_scale(grads, norm, 100.0);  // below the limit: untouched
  EXPECT_FLOAT_EQ(a[0].item<float>(), 3.0f);
  cadre::grad_clip_scale(grads, norm, 1.0);
  EXPECT_NEAR(std::sqrt(cadre::grad_sq_norm(grads)), 1.0, 1e-5);
}
