// In-process checks of the module API on one rank: activation checkpointing changes no
// gradient, with or without FSDP units; wrap policies select what they say; shared parameters
// across sibling units, a second fully_shard of a module and forward hooks are handled.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "core/error.h"
#include "shard/activation_checkpoint.h"
#include "shard/fully_shard.h"
#include "shard/memory_report.h"
#include "shard/module_hooks.h"
#include "shard/user_net.h"
#include "shard/wrap_policy.h"

namespace {

// Loss and every parameter gradient (by name) of one forward/backward on a fixed batch.
std::map<std::string, at::Tensor> gradients(usernet::Net& net, double* loss_out) {
  auto [x, y] = usernet::batch(3, 0, 8);
  at::Tensor loss = at::cross_entropy_loss(cadre::call(&net, x), y);
  loss.backward();
  *loss_out = loss.item<double>();
  std::map<std::string, at::Tensor> grads;
  for (const auto& p : net.named_parameters())
    if (p.value().requires_grad()) grads[p.key()] = p.value().grad().clone();
  return grads;
}

TEST(ActivationCheckpointing, SameGradientsAsWithout) {
  auto plain = std::make_shared<usernet::Net>(), wrapped = std::make_shared<usernet::Net>();
  plain->init(5);
  wrapped->init(5);
  auto handles = cadre::apply_activation_checkpointing(*wrapped, cadre::wrap_by_type<usernet::Block>());
  ASSERT_EQ(handles.size(), 3u);
  double a = 0, b = 0;
  auto ga = gradients(*plain, &a), gb = gradients(*wrapped, &b);
  EXPECT_EQ(a, b);
  ASSERT_EQ(ga.size(), gb.size());
  // Recomputation runs the same kernels on the same inputs: bit-identical.
  for (const auto& [name, g] : ga) EXPECT_TRUE(at::equal(g, gb.at(name))) << name;
}

// Behind frozen layers a block's input needs no gradient; its own parameters still do, and a
// checkpointed block must give them the same gradients as a plain one (a re-entrant checkpoint
// whose inputs need none records no backward at all).
TEST(ActivationCheckpointing, ABlockWhoseInputNeedsNoGradientStillTrainsItsParameters) {
  usernet::Block plain(8), wrapped(8);
  {
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < plain.parameters().size(); ++i) wrapped.parameters()[i].copy_(plain.parameters()[i]);
  }
  cadre::HookHandle handle = cadre::checkpoint_wrapper(wrapped);
  const at::Tensor x = at::randn({4, 8}, at::make_generator<at::CPUGeneratorImpl>(3));  // requires no grad
  cadre::call(&plain, x).square().sum().backward();
  at::Tensor out = cadre::call(&wrapped, x);
  ASSERT_TRUE(out.requires_grad());
  out.square().sum().backward();
  for (size_t i = 0; i < plain.parameters().size(); ++i) {
    ASSERT_TRUE(wrapped.parameters()[i].grad().defined()) << "parameter " << i;
    EXPECT_TRUE(at::equal(wrapped.parameters()[i].grad(), plain.parameters()[i].grad())) << "parameter " << i;
  }
}

TEST(ActivationCheckpointing, WithFsdpUnitsSameGradientsAsPlain) {
  auto plain = std::make_shared<usernet::Net>(), sharded = std::make_shared<usernet::Net>();
  plain->init(9);
  sharded->init(9);
  auto handles = cadre::apply_activation_checkpointing(*sharded, cadre::wrap_by_type<usernet::Block>());
  cadre::FullyShardOptions options;  // one rank: FULL_SHARD without a group
  for (auto* unit : sharded->units()) cadre::fully_shard(*unit, options);
  cadre::FSDPModule fsdp = cadre::fully_shard(*sharded, options);
  double a = 0, b = 0;
  auto ga = gradients(*plain, &a);
  auto [x, y] = usernet::batch(3, 0, 8);
  at::Tensor loss = at::cross_entropy_loss(cadre::call(sharded, x), y);
  loss.backward();
  b = loss.item<double>();
  EXPECT_NEAR(a, b, 1e-6 * std::abs(a));
  // The optimizer's pieces carry the gradient of the named parameter they belong to.
  const auto& layout = fsdp.piece_layout();
  const auto& pieces = fsdp.parameters();
  ASSERT_EQ(layout.size(), pieces.size());
  for (size_t k = 0; k < pieces.size(); ++k) {
    at::Tensor want = ga.at(layout[k].name).reshape({-1}).narrow(0, layout[k].start, pieces[k].numel());
    EXPECT_TRUE(at::allclose(pieces[k].grad(), want, 1e-5, 1e-7)) << layout[k].name;
  }
}

TEST(WrapPolicy, ByTypeAndByParameterCount) {
  usernet::Net net;
  auto by_type = cadre::wrap_select(net, cadre::wrap_by_type<usernet::Block>());
  ASSERT_EQ(by_type.size(), 3u);
  EXPECT_EQ(by_type[0], net.blocks->ptr(0).get());
  // A block has 16*2 (norm) + 16*32+32 + 32*16+16 = 1,104 parameters; the tail's Linears 272
  // each. With a floor of 1,000 exactly the three blocks qualify, inner first.
  auto by_count = cadre::wrap_select(net, cadre::wrap_by_param_count(1000));
  EXPECT_EQ(by_count, by_type);
  // A floor above any one block takes the smallest module holding enough unwrapped parameters.
  auto big = cadre::wrap_select(net, cadre::wrap_by_param_count(3000));
  ASSERT_EQ(big.size(), 1u);
  EXPECT_EQ(big[0], net.blocks.ptr().get());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const cadre::Error& e) {
    return e.what();
  }
  return "";
}

TEST(FullyShardErrors, SharedParameterAcrossSiblingUnits) {
  auto net = std::make_shared<usernet::Net>();
  cadre::FullyShardOptions options;
  cadre::fully_shard(*net->mix, options);
  cadre::fully_shard(*net->shared, options);
  cadre::FSDPModule fsdp = cadre::fully_shard(*net, options);
  std::string msg = error_of([&] { fsdp.parameters(); });
  EXPECT_NE(msg.find("is shared by FSDP units"), std::string::npos) << msg;
  EXPECT_NE(msg.find("mix"), std::string::npos) << msg;
}

TEST(FullyShardErrors, ModuleShardedTwice) {
  auto net = std::make_shared<usernet::Net>();
  cadre::FullyShardOptions options;
  cadre::FSDPModule a = cadre::fully_shard(*net->mix, options);
  std::string msg = error_of([&] { cadre::fully_shard(*net->mix, options); });
  EXPECT_NE(msg.find("already an FSDP unit"), std::string::npos) << msg;
}

TEST(FullyShardErrors, InnerHandleAfterTheRootTookItsUnits) {
  auto net = std::make_shared<usernet::Net>();
  cadre::FullyShardOptions options;
  cadre::FSDPModule inner = cadre::fully_shard(*net->mix, options);
  cadre::FSDPModule root = cadre::fully_shard(*net, options);
  EXPECT_NE(error_of([&] { inner.parameters(); }).find("taken in by fully_shard on an enclosing module"),
            std::string::npos);
  EXPECT_FALSE(root.parameters().empty());
}

TEST(ForwardHooks, RunAroundTheForwardAndGoWithTheirHandle) {
  usernet::Block block(4);
  std::vector<std::string> seen;
  {
    cadre::ForwardHooks hooks;
    hooks.pre = [&](const std::vector<at::Tensor>& in) { seen.push_back("pre " + std::to_string(in.size())); };
    hooks.post = [&](const std::vector<at::Tensor>& out) { seen.push_back("post " + std::to_string(out.size())); };
    cadre::HookHandle handle = cadre::register_forward_hooks(block, hooks);
    cadre::call(&block, at::zeros({2, 4}));
  }
  cadre::call(&block, at::zeros({2, 4}));  // handle gone: no hooks
  EXPECT_EQ(seen, (std::vector<std::string>{"pre 1", "post 1"}));
}

}  // namespace

// The memory report puts a GPU's peak beside the formula when the run has one, and says
// nothing of a device on the CPU (where peak RSS is the figure).
TEST(MemoryReport, ShowsTheDevicePeakOnlyForAGpuRun) {
  cadre::ShardMemory m;
  m.padded_numel = 1 << 20;
  m.shard_size = 2;
  m.params = m.grads = 4 << 19;
  const cadre::StateFormula formula = cadre::state_formula(cadre::Strategy::FullShard, m, 4);
  cadre::MemoryReport cpu = cadre::memory_report(m, 8 << 19, formula);
  EXPECT_EQ(cpu.to_text().find("cuda"), std::string::npos) << cpu.to_text();
  EXPECT_FALSE(cpu.to_json().contains("peak_device_bytes"));
  EXPECT_EQ(cpu.to_json()["formula_state_bytes"], 16 * (1 << 20) / 2);

  cadre::MemoryReport gpu = cpu;
  gpu.device = "cuda:1";
  gpu.peak_device = int64_t(3) << 29;  // 1.5 GiB
  EXPECT_NE(gpu.to_text().find("; peak cuda:1 memory 1536.0 MiB (caching allocator)"), std::string::npos)
      << gpu.to_text();
  EXPECT_EQ(gpu.to_json()["peak_device_bytes"], int64_t(3) << 29);
}
