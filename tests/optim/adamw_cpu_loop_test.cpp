// AdamW's one-pass CPU loop reads bfloat16 gradients (ZeRO-1's) as their 16 bits widened to
// float32: the steps must equal, bit for bit, the same loop fed those gradients already widened
// by libtorch (c10::BFloat16 -> float), at sizes that run the vector body and its scalar tail.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

#include "optim/adamw.h"

namespace {

struct OptimizerRun {
  std::vector<at::Tensor> params;
  std::unique_ptr<cadre::AdamW> opt;
};

OptimizerRun make_run() {
  at::manual_seed(11);
  OptimizerRun r;
  for (int64_t n : {1, 3, 4, 7, 64, 1001, 70001}) r.params.push_back(at::randn({n}));
  r.opt = std::make_unique<cadre::AdamW>(r.params, std::vector<bool>(r.params.size(), true), cadre::AdamWOptions{});
  return r;
}

TEST(AdamWCpuLoop, BFloat16GradientsStepAsTheirFloat32WideningDoes) {
  OptimizerRun narrow = make_run(), wide = make_run();
  for (int step = 1; step <= 5; ++step) {
    at::manual_seed(200 + step);
    for (size_t i = 0; i < narrow.params.size(); ++i) {
      // Spread over many binades, zeros and negatives included, so every exponent path is read.
      at::Tensor g = (at::randn(narrow.params[i].sizes()) * at::exp2(at::randint(-20, 20, narrow.params[i].sizes())))
                         .to(at::kBFloat16);
      if (g.numel() > 2) g[1] = 0;
      narrow.params[i].mutable_grad() = g;
      wide.params[i].mutable_grad() = g.to(at::kFloat);
    }
    narrow.opt->step(1e-2);
    wide.opt->step(1e-2);
    for (size_t i = 0; i < narrow.params.size(); ++i)
      ASSERT_TRUE(at::equal(narrow.params[i], wide.params[i]))
          << "parameter " << i << " (" << narrow.params[i].numel() << " elements) differs after step " << step
          << ": max |difference| " << (narrow.params[i] - wide.params[i]).abs().max().item<float>();
  }
  // The parameters moved: the comparison above was not between two untouched copies.
  OptimizerRun untouched = make_run();
  EXPECT_FALSE(at::equal(narrow.params[6], untouched.params[6]));
}

}  // namespace
