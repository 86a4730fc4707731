// SGD's behaviour beyond the arithmetic (which sgd_parity_test.cpp checks against
// torch.optim.SGD): the first step takes the gradient as the momentum buffer, a restored
// optimizer continues with its buffers, bfloat16 gradients and non-contiguous parameters give
// what float32 contiguous ones give, and optim.no_decay / optim.name pick what they say.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/config.h"
#include "core/error.h"
#include "optim/make_optimizer.h"
#include "optim/sgd.h"

namespace {

at::Tensor with_grad(at::Tensor p, const at::Tensor& g) {
  p.mutable_grad() = g.clone();
  return p;
}

// Dampening applies from the second step on: torch.optim.SGD starts the buffer as the gradient.
TEST(Sgd, FirstStepTakesTheGradientAsTheBufferWithoutDampening) {
  at::Tensor p = at::zeros({2});
  cadre::Sgd sgd({p}, {false}, {/*momentum=*/0.5, /*dampening=*/0.5, 0, false});
  with_grad(p, at::full({2}, 2.0f));
  sgd.step(1.0);
  EXPECT_FLOAT_EQ(sgd.momentum_buffer()[0][0].item<float>(), 2.0f);  // not (1 - 0.5) * 2
  EXPECT_FLOAT_EQ(p[0].item<float>(), -2.0f);
  with_grad(p, at::full({2}, 4.0f));
  sgd.step(1.0);
  EXPECT_FLOAT_EQ(sgd.momentum_buffer()[0][0].item<float>(), 0.5f * 2.0f + 0.5f * 4.0f);
  EXPECT_FLOAT_EQ(p[0].item<float>(), -2.0f - 3.0f);
  EXPECT_EQ(sgd.steps(), 2);
}

// A second optimizer given the first one's buffers and step count (what a checkpoint restores)
// takes the same next step as the first.
TEST(Sgd, RestoredBuffersAndStepsContinueExactly) {
  auto options = cadre::SgdOptions{0.9, 0.1, 0.01, false};
  at::Tensor a = at::randn({5, 3}), b = a.clone();
  cadre::Sgd first({a}, {true}, options);
  for (int i = 0; i < 3; ++i) {
    with_grad(a, at::randn({5, 3}));
    first.step(0.1);
  }
  b.copy_(a);
  cadre::Sgd second({b}, {true}, options);
  second.momentum_buffer()[0].copy_(first.momentum_buffer()[0]);
  second.set_steps(first.steps());
  at::Tensor g = at::randn({5, 3});
  with_grad(a, g);
  with_grad(b, g);
  first.step(0.05);
  second.step(0.05);
  EXPECT_TRUE(at::equal(a, b));
  EXPECT_TRUE(at::equal(first.momentum_buffer()[0], second.momentum_buffer()[0]));
}

// The fused loop (contiguous float32) and the op-by-op path (here: a transposed, non-contiguous
// parameter) follow the same update; a bfloat16 gradient is the float32 one rounded.
TEST(Sgd, FusedAndOpByOpPathsAgreeAndBf16GradientsAreWidened) {
  auto options = cadre::SgdOptions{0.9, 0, 1e-2, true};
  at::Tensor base = at::randn({6, 4});
  at::Tensor fused = base.clone(), storage = base.t().contiguous(), strided = storage.t(), bf = base.clone();
  ASSERT_FALSE(strided.is_contiguous());
  cadre::Sgd a({fused}, {true}, options), b({strided}, {true}, options), c({bf}, {true}, options);
  for (int step = 0; step < 4; ++step) {
    at::Tensor g = at::randn({6, 4}).to(at::kBFloat16);
    with_grad(fused, g.to(at::kFloat));
    strided.mutable_grad() = g.to(at::kFloat).t().contiguous().t();
    with_grad(bf, g);
    a.step(0.1);
    b.step(0.1);
    c.step(0.1);
  }
  // Same float32 operations in the same order, up to the compiler contracting a * b + c into
  // one rounding: a few units of rounding of the values (|p| < 10).
  EXPECT_TRUE(at::allclose(fused, strided, 0, 1e-5)) << (fused - strided).abs().max().item<float>();
  EXPECT_TRUE(at::equal(fused, bf));
  EXPECT_FALSE(at::equal(fused, base));
}

TEST(Sgd, BadOptionsNameTheKey) {
  auto message = [](cadre::SgdOptions o) {
    try {
      cadre::Sgd({at::zeros({1})}, {true}, o);
    } catch (const cadre::ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({-0.1, 0, 0, false}).find("optim.momentum"), std::string::npos);
  EXPECT_NE(message({1.0, 0, 0, false}).find("optim.momentum"), std::string::npos);
  EXPECT_NE(message({0, 0, 0, true}).find("optim.nesterov"), std::string::npos);
  EXPECT_NE(message({0.9, 0.5, 0, true}).find("optim.nesterov"), std::string::npos);
  EXPECT_NE(message({0.9, 0, -1, false}).find("optim.weight_decay"), std::string::npos);
}

// optim.no_decay: norm_and_bias leaves 1-d parameters undecayed, none decays them; the same for
// AdamW and SGD. A zero gradient isolates the decay.
TEST(MakeOptimizer, NoDecayChoosesWhichParametersDecay) {
  for (std::string name : {"sgd", "adamw"})
    for (std::string no_decay : {"norm_and_bias", "none"}) {
      cadre::OptimConfig o;
      o.name = name;
      o.no_decay = no_decay;
      o.weight_decay = 0.5;
      at::Tensor matrix = with_grad(at::ones({2, 2}), at::zeros({2, 2}));
      at::Tensor bias = with_grad(at::ones({2}), at::zeros({2}));
      auto optimizer = cadre::make_optimizer(o, {matrix, bias}, {true, false});
      optimizer->step(0.1);
      EXPECT_LT(matrix[0][0].item<float>(), 1.0f) << name << " " << no_decay;
      EXPECT_EQ(bias[0].item<float>() < 1.0f, no_decay == "none") << name << " " << no_decay;
      const auto state = optimizer->state();
      ASSERT_EQ(state.size(), name == "sgd" ? 0u : 2u);  // plain SGD (momentum 0) keeps no state
    }
  cadre::OptimConfig o;
  o.name = "sgd";
  o.momentum = 0.9;
  auto sgd = cadre::make_optimizer(o, {at::zeros({3})}, {false});
  ASSERT_EQ(sgd->state().size(), 1u);
  EXPECT_EQ(sgd->state()[0].name, "momentum_buffer");
  EXPECT_EQ(sgd->state_bytes(), 12);
}

}  // namespace
