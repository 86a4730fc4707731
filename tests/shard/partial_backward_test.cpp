// FullyShardOptions::partial_backward on one rank: a backward that runs through some of the
// units only (a pipeline stage's chunks under the interleaved schedule) is an error without it,
// naming the unit, and with it leaves the units that sat out as they were; over a step of
// backwards through either unit, with and without no_sync (ZeRO-1, which accumulates only
// under no_sync, with it), the gradients are those of the same
// backwards on the plain module (float32, the same ops in the same order: equal).
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/nn/modules/linear.h>

#include <map>
#include <optional>
#include <string>

#include "shard/fully_shard.h"
#include "shard/module_hooks.h"

namespace {

// Two blocks a model could put in two chunks: the forward runs one of them or both.
struct TwoChunks : torch::nn::Module {
  TwoChunks() {
    a = register_module("a", std::make_shared<torch::nn::LinearImpl>(6, 6));
    b = register_module("b", std::make_shared<torch::nn::LinearImpl>(6, 6));
  }
  // chunk 0: a alone, 1: b alone, -1: both.
  at::Tensor forward(const at::Tensor& x, int64_t chunk) {
    at::Tensor h = x;
    if (chunk != 1) h = cadre::call(a, h).tanh();
    if (chunk != 0) h = cadre::call(b, h).tanh();
    return h;
  }
  std::shared_ptr<torch::nn::LinearImpl> a, b;
};

// A step's backwards: chunk 1, chunk 0, chunk 1, chunk 0 (an interleaved stage's order of
// backwards, the last through chunk 0), each on its own input.
constexpr int64_t kChunks[] = {1, 0, 1, 0};

at::Tensor input_of(size_t i) { return at::sin(at::arange(12, at::kFloat).view({2, 6}) * double(i + 1)); }

std::shared_ptr<TwoChunks> copy_of(TwoChunks& from) {
  auto to = std::make_shared<TwoChunks>();
  c10::NoGradGuard no_grad;
  auto source = from.named_parameters();
  for (auto& p : to->named_parameters()) p.value().copy_(source[p.key()]);
  return to;
}

std::map<std::string, at::Tensor> plain_gradients(TwoChunks& model) {
  for (size_t i = 0; i < std::size(kChunks); ++i) model.forward(input_of(i), kChunks[i]).square().sum().backward();
  std::map<std::string, at::Tensor> out;
  for (const auto& p : model.named_parameters()) out[p.key()] = p.value().grad().flatten();
  return out;
}

TEST(PartialBackward, ABackwardThatSkipsAUnitIsAnErrorWithoutIt) {
  auto model = std::make_shared<TwoChunks>();
  cadre::FullyShardOptions options;
  cadre::fully_shard(*model->a, options);
  cadre::fully_shard(*model->b, options);
  cadre::FSDPModule sharded = cadre::fully_shard(*model, options);
  try {
    cadre::call(model, input_of(0), int64_t{0}).sum().backward();
    FAIL() << "a backward without unit b's gradients went through";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("FSDP unit b: 2 of its 2 parameter gradients never arrived"),
              std::string::npos)
        << e.what();
  }
}

TEST(PartialBackward, UnitsThatSitOutKeepTheirGradientsUnderEveryStrategy) {
  auto reference = std::make_shared<TwoChunks>();
  const std::map<std::string, at::Tensor> want = plain_gradients(*copy_of(*reference));
  for (const cadre::Strategy strategy : {cadre::Strategy::FullShard, cadre::Strategy::NoShard, cadre::Strategy::Zero1}) {
    for (const bool no_sync : {false, true}) {
      // ZeRO-1 accumulates only under no_sync: a reducing backward's gradient is the step's.
      if (strategy == cadre::Strategy::Zero1 && !no_sync) continue;
      const std::string what = std::string(cadre::strategy_name(strategy)) + (no_sync ? " under no_sync" : "");
      auto model = copy_of(*reference);
      cadre::FullyShardOptions options;
      options.strategy = strategy;
      options.partial_backward = true;
      cadre::fully_shard(*model->a, options);
      cadre::fully_shard(*model->b, options);
      cadre::FSDPModule sharded = cadre::fully_shard(*model, options);
      sharded.zero_grad();
      std::optional<cadre::FSDPModule::NoSyncGuard> accumulate;
      for (size_t i = 0; i < std::size(kChunks); ++i) {
        const bool last = i + 1 == std::size(kChunks);
        if (no_sync && !last && !accumulate) accumulate.emplace(&sharded.tree());
        if (last) accumulate.reset();
        cadre::call(model, input_of(i), kChunks[i]).square().sum().backward();
      }
      const auto& pieces = sharded.parameters();
      const auto& layout = sharded.piece_layout();
      ASSERT_EQ(pieces.size(), want.size()) << what;
      for (size_t k = 0; k < pieces.size(); ++k) {
        const at::Tensor& expected = want.at(layout[k].name);
        const at::Tensor got = pieces[k].grad().flatten();
        EXPECT_TRUE(at::equal(got, expected.narrow(0, layout[k].start, got.numel())))
            << what << ": " << layout[k].name << "'s gradient differs from the plain module's";
      }
    }
  }
}

}  // namespace
