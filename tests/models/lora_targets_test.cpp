// lora.targets and the adapters' initial values (models/lora.h) on the tiny Llama: the default
// (the attention projections), PEFT's names, all-linear (not the head), a regular expression,
// and entries that name nothing; A uniform within PEFT's bound and B zero, any slice the same
// bits as the whole; the base frozen, the adapters not; dropout on the adapter's input in training
// only, drawing the same masks when activation checkpointing recomputes a block.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>

#include "core/error.h"
#include "models/llama/llama_model.h"
#include "models/lora.h"
#include "models/lora_dropout.h"
#include "shard/module_hooks.h"
#include "support/tiny_llama.h"

namespace {

std::vector<std::string> adapted(const std::string& targets) {
  cadre::LlamaModel model(cadre::test::tiny_llama_config(), /*deferred=*/true);
  cadre::LoraConfig lora;
  lora.rank = 2;
  lora.targets = targets;
  return cadre::lora_apply(model.llama(), lora, model.lora_names());
}

TEST(LoraTargets, DefaultsPeftNamesAllLinearAndPatterns) {
  EXPECT_EQ(adapted(""), (std::vector<std::string>{"layers.0.attention.wq", "layers.0.attention.wk",
                                                   "layers.0.attention.wv", "layers.0.attention.wo",
                                                   "layers.1.attention.wq", "layers.1.attention.wk",
                                                   "layers.1.attention.wv", "layers.1.attention.wo"}));
  EXPECT_EQ(adapted("q_proj, v_proj"), (std::vector<std::string>{"layers.0.attention.wq", "layers.0.attention.wv",
                                                                 "layers.1.attention.wq", "layers.1.attention.wv"}));
  EXPECT_EQ(adapted("down_proj"), (std::vector<std::string>{"layers.0.feed_forward.w2", "layers.1.feed_forward.w2"}));
  const auto all = adapted("all-linear");
  EXPECT_EQ(all.size(), 14u);
  EXPECT_EQ(std::count(all.begin(), all.end(), "output"), 0) << "all-linear leaves the head out, as PEFT";
  EXPECT_EQ(adapted("lm_head"), std::vector<std::string>{"output"});
  EXPECT_EQ(adapted("layers\\.1\\.attention\\.w[qk]"),
            (std::vector<std::string>{"layers.1.attention.wq", "layers.1.attention.wk"}));
}

TEST(LoraTargets, EntriesThatNameNothingAreConfigErrors) {
  for (const auto& [targets, says] : std::vector<std::pair<std::string, std::string>>{
           {"wq,q_prj", "lora.targets: 'q_prj' matches no linear layer of the model (its layers: layers.0.attention.wq"},
           {"wq,,wk", "has an empty entry"},
           {"layers\\.[", "is not a regular expression"},
           {"layers\\.9\\..*", "matches no linear layer"}}) {
    try {
      adapted(targets);
      ADD_FAILURE() << targets << " was accepted";
    } catch (const cadre::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << targets << ": " << e.what();
    }
  }
}

TEST(LoraInit, UniformAWithinPeftsBoundZeroBAnySliceTheSameBits) {
  cadre::LlamaModel model(cadre::test::tiny_llama_config());
  cadre::LoraConfig lora;
  lora.rank = 8;
  lora.targets = "all-linear";
  cadre::lora_apply(model.llama(), lora, model.lora_names());
  model.llama().init_weights(3);
  cadre::lora_init_adapters(model.llama(), 3);
  auto source = cadre::lora_init_source(model.llama().init_source(3), model.llama(), 3);
  const at::Tensor a = model.llama().layers->blocks[1]->feed_forward->w2->lora_a;  // [8, 192]: fan-in 192
  const double bound = 1.0 / std::sqrt(192.0);
  EXPECT_LE(a.abs().max().item<double>(), bound);
  EXPECT_GT(a.abs().max().item<double>(), 0.95 * bound);
  EXPECT_NEAR(a.mean().item<double>(), 0.0, 4 * bound / std::sqrt(3.0 * double(a.numel())));  // 4 sigma of a uniform mean
  EXPECT_EQ(model.llama().layers->blocks[1]->feed_forward->w2->lora_b.abs().max().item<double>(), 0.0);
  std::vector<float> slice(100);
  source->read("layers.1.feed_forward.w2.lora_a", 500, 100, slice.data());
  EXPECT_TRUE(at::equal(at::from_blob(slice.data(), {100}, at::kFloat), a.view({-1}).narrow(0, 500, 100)));
  // The base still reads from the model's own source; another seed, other adapters.
  std::vector<float> norm(4);
  source->read("norm.weight", 0, 4, norm.data());
  EXPECT_EQ(norm, std::vector<float>(4, 1.0f));
  const at::Tensor seed3 = a.clone();
  cadre::lora_init_adapters(model.llama(), 4);
  EXPECT_FALSE(at::equal(a, seed3));

  const int64_t frozen = cadre::lora_freeze_base(model.llama());
  int64_t trained = 0;
  for (const auto& p : model.llama().named_parameters()) {
    EXPECT_EQ(p.value().requires_grad(), cadre::lora_is_adapter(p.key())) << p.key();
    if (p.value().requires_grad()) trained += p.value().numel();
  }
  EXPECT_EQ(frozen, cadre::llama_param_count(cadre::test::tiny_llama_config()));
  EXPECT_GT(trained, 0);
}

// Dropout: y - xW^T is the adapter's share; in training it varies with the mask, in eval mode it is
// the whole adapter. Under activation checkpointing the recomputed blocks draw the masks the
// forward drew, so the gradients are those of the run without it, bit for bit.
TEST(LoraDropout, TrainingOnlyAndRecomputedWithTheSameMasks) {
  cadre::LoraLinear layer(32, 16);
  layer.add_adapter(4, 8, 0.5);
  c10::NoGradGuard no_grad;
  layer.weight.normal_();
  layer.lora_a.normal_();
  layer.lora_b.normal_();
  const at::Tensor x = at::randn({8, 32});
  const at::Tensor plain = at::matmul(at::matmul(x, layer.lora_a.t()), layer.lora_b.t()) * 2.0;
  EXPECT_FALSE(at::allclose(layer.forward(x) - at::matmul(x, layer.weight.t()), plain, 1e-4, 1e-4));
  layer.train(false);
  EXPECT_TRUE(at::allclose(layer.forward(x) - at::matmul(x, layer.weight.t()), plain, 1e-4, 1e-4));
}

// Counter-based masks: a tensor-parallel slice of the columns and a data-parallel slice of the
// samples draw exactly that part of the whole input's mask; another step or layer draws another
// mask; the dropped fraction is p within five binomial standard deviations.
TEST(LoraDropout, MasksAreAFunctionOfSampleStepLayerAndColumnAlone) {
  const double p = 0.3;
  const cadre::DropoutDraw draw{7, 3, 0};
  const at::Tensor whole = cadre::lora_dropout_keep(draw, p, "layers.0.attention.wo", 4, 5, 32, 0, 32);
  const at::Tensor right = cadre::lora_dropout_keep(draw, p, "layers.0.attention.wo", 4, 5, 13, 19, 32);
  EXPECT_TRUE(at::equal(right, whole.narrow(2, 19, 13)));
  const at::Tensor later = cadre::lora_dropout_keep({7, 3, 2}, p, "layers.0.attention.wo", 2, 5, 32, 0, 32);
  EXPECT_TRUE(at::equal(later, whole.narrow(0, 2, 2)));
  EXPECT_FALSE(at::equal(cadre::lora_dropout_keep({7, 4, 0}, p, "layers.0.attention.wo", 4, 5, 32, 0, 32), whole));
  EXPECT_FALSE(at::equal(cadre::lora_dropout_keep(draw, p, "layers.1.attention.wo", 4, 5, 32, 0, 32), whole));
  EXPECT_FALSE(at::equal(cadre::lora_dropout_keep({8, 3, 0}, p, "layers.0.attention.wo", 4, 5, 32, 0, 32), whole));
  const at::Tensor many = cadre::lora_dropout_keep(draw, p, "layers.0.attention.wq", 64, 32, 100, 0, 100);
  const double n = double(many.numel()), dropped = n - double(many.sum().item<int64_t>());
  EXPECT_NEAR(dropped, p * n, 5 * std::sqrt(n * p * (1 - p)));
  // Applied: the kept elements scaled by 1 / (1 - p), the rest zero.
  cadre::set_dropout_draw(draw);
  const at::Tensor x = at::randn({4, 5, 32});
  const at::Tensor y = cadre::lora_dropout(x, p, "layers.0.attention.wo", 0, 32);
  cadre::set_dropout_draw(std::nullopt);
  EXPECT_TRUE(at::allclose(y, at::where(whole, x / (1 - p), at::zeros_like(x)), 1e-6, 1e-7));
}

TEST(LoraDropout, CheckpointedBlocksGetTheSameGradients) {
  const cadre::LlamaConfig config = cadre::test::tiny_llama_config();
  const at::Tensor tokens = at::randint(config.vocab_size, {2, 17});
  auto grads = [&](bool checkpointed, bool counter_based) {
    cadre::LlamaModel model(config);
    cadre::LoraConfig lora;
    lora.rank = 4;
    lora.dropout = 0.3;
    lora.targets = "all-linear";
    cadre::lora_apply(model.llama(), lora, model.lora_names());
    model.llama().init_weights(1);
    cadre::lora_init_adapters(model.llama(), 1);
    {
      c10::NoGradGuard no_grad;  // B nonzero: A's gradient (through the dropped-out input) is compared too
      for (auto& p : model.llama().named_parameters())
        if (cadre::ends_with(p.key(), ".lora_b")) p.value().fill_(0.01);
    }
    cadre::lora_freeze_base(model.llama());
    std::vector<cadre::HookHandle> wrapped;
    if (checkpointed)
      for (auto& block : model.llama().layers->blocks) wrapped.push_back(cadre::checkpoint_wrapper(*block));
    at::manual_seed(5);
    if (counter_based) cadre::set_dropout_draw(cadre::DropoutDraw{5, 1, 0});
    cadre::llama_loss(model.llama().forward(tokens.narrow(1, 0, 16)), tokens.narrow(1, 1, 16)).backward();
    cadre::set_dropout_draw(std::nullopt);
    std::vector<at::Tensor> out;
    for (const auto& p : model.llama().parameters())
      if (p.requires_grad()) out.push_back(p.grad().clone());
    return out;
  };
  for (bool counter_based : {false, true}) {  // torch's generator (library use), the trainer's draws
    const auto plain = grads(false, counter_based), checkpointed = grads(true, counter_based);
    ASSERT_EQ(plain.size(), 28u);
    ASSERT_EQ(checkpointed.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i)
      EXPECT_TRUE(at::equal(plain[i], checkpointed[i])) << "adapter factor " << i << " counter-based " << counter_based;
    EXPECT_GT(plain[0].abs().max().item<double>(), 0.0);
  }
}

}  // namespace
