// AdamW's moments are zero pages until the first step writes them (core/zero_pages.h): making
// the optimizer for 64 MiB of parameters leaves the peak resident memory where it was, and the
// first step then starts from zero moments, as with zero-filled ones: m = (1 - b1) g and
// v = (1 - b2) g^2, so the bias-corrected update is g / (|g| + eps) (float32 within a few ulps).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>
#include <memory>
#include <vector>

#include "core/sysinfo.h"
#include "optim/adamw.h"

namespace {

TEST(AdamWState, CostsNoMemoryUntilTheFirstStepAndThenStartsFromZero) {
  at::manual_seed(5);
  const int64_t n = int64_t(16) << 20;  // 64 MiB of float32
  at::Tensor p = at::randn({n}), p0 = p.clone();
  const cadre::AdamWOptions o;
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM starts again from VmRSS
  const int64_t before = cadre::process_peak_rss_bytes();
  cadre::AdamW opt({p}, {true}, o);
  const int64_t grown = cadre::process_peak_rss_bytes() - before;
  EXPECT_LT(grown, int64_t(16) << 20) << "making the optimizer's 128 MiB of moments took " << (grown >> 20) << " MiB";
  const at::Tensor g = at::randn({n});
  p.mutable_grad() = g;
  const double lr = 1e-3;
  opt.step(lr);
  EXPECT_TRUE(at::allclose(opt.exp_avg()[0], g * (1 - o.beta1), 1e-6, 0));
  EXPECT_TRUE(at::allclose(opt.exp_avg_sq()[0], g * g * (1 - o.beta2), 1e-6, 0));
  const at::Tensor want = p0 * (1 - lr * o.weight_decay) - lr * g / (g.abs() + o.eps);
  EXPECT_TRUE(at::allclose(p, want, 1e-6, 1e-7)) << (p - want).abs().max().item<double>();
}

}  // namespace
