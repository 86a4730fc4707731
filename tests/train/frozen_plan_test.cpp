// Frozen parameters in the plan and the memory estimate, in-process on one rank: the plan of a
// network with frozen layers counts them apart (one flat parameter per unit, 1/N of each per
// rank when regrouped over N), the set-up allocates what the plan says, and the estimate gives
// them masters and a place among the gathered units, but no gradient and no optimizer state.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <unordered_set>

#include "core/error.h"
#include "shard/fully_shard.h"
#include "shard/user_net.h"
#include "train/freeze.h"
#include "train/memory_estimate.h"

namespace {

// The input layer and each block's first layer frozen (the network's `offset` already is).
int64_t freeze_some(usernet::Net& net) {
  int64_t frozen = 0;
  for (auto& item : net.named_parameters()) {
    if (item.key().rfind("embed.", 0) == 0 || item.key().find(".fc1.") != std::string::npos)
      item.value().set_requires_grad(false);
    if (!item.value().requires_grad()) frozen += item.value().numel();
  }
  return frozen;
}

cadre::FSDPModule shard(usernet::Net& net, cadre::Strategy strategy) {
  cadre::FullyShardOptions options;
  options.strategy = strategy;
  if (strategy != cadre::Strategy::NoShard)
    for (torch::nn::Module* unit : net.units()) cadre::fully_shard(*unit, options);
  return cadre::fully_shard(net, options);
}

int64_t rounded_up(int64_t n, int64_t group) { return (n + group - 1) / group * group; }

TEST(FrozenPlan, FrozenParametersArePlannedPerUnitAndShardedOverTheGroup) {
  usernet::Net net;
  const int64_t frozen = freeze_some(net);
  cadre::FSDPModule fsdp = shard(net, cadre::Strategy::FullShard);
  const cadre::ShardPlan one = fsdp.plan(), four = one.regrouped(4);

  ASSERT_EQ(one.frozen.size(), 4u);  // each block's first layer; the root's input layer and offset
  EXPECT_EQ(one.frozen_numel(), frozen);
  EXPECT_EQ(one.frozen.back().unit, "root");
  int64_t trainable = 0;
  std::unordered_set<const c10::TensorImpl*> seen;  // `mix` and `shared` hold one tensor: counted once
  for (const auto& p : net.parameters())
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) trainable += p.numel();
  EXPECT_EQ(one.numel(), trainable) << "trainable flat parameters hold no frozen parameter";
  int64_t kept = 0;
  for (const auto& f : four.frozen) {
    EXPECT_EQ(f.padded, rounded_up(f.numel, 4)) << f.unit;
    kept += f.shard_numel;
  }
  EXPECT_EQ(four.frozen_shard_numel(), kept);
  EXPECT_EQ(4 * kept, [&] {
    int64_t padded = 0;
    for (const auto& f : four.frozen) padded += f.padded;
    return padded;
  }());

  // The set-up makes what the plan said: a flat parameter per unit, no gradient buffer.
  const auto& flats = fsdp.frozen_flat_params();
  ASSERT_EQ(flats.size(), one.frozen.size());
  int64_t pieces = 0;
  for (size_t k = 0; k < flats.size(); ++k) {
    EXPECT_EQ(flats[k]->unit, one.frozen[k].unit);
    EXPECT_EQ(flats[k]->numel, one.frozen[k].numel);
    EXPECT_FALSE(flats[k]->trainable);
    EXPECT_FALSE(flats[k]->grad_full.defined()) << flats[k]->unit;
  }
  for (const auto& piece : fsdp.frozen_parameters()) {
    EXPECT_FALSE(piece.requires_grad());
    pieces += piece.numel();
  }
  EXPECT_EQ(pieces, frozen) << "one rank keeps every frozen element once";
  EXPECT_EQ(fsdp.memory().frozen, 4 * one.frozen_shard_numel());
  int64_t optimizer_pieces = 0;
  for (const auto& piece : fsdp.parameters()) optimizer_pieces += piece.numel();
  EXPECT_EQ(optimizer_pieces, trainable) << "the optimizer sees no frozen parameter";
}

// bf16 compute on a GPU (no huge-page rounding): masters 4 bytes per kept element for both
// kinds, gradients and AdamW's 8 bytes only for the trainable ones; a step holds the root unit
// whole and beside it two of the largest other unit, each unit's frozen part in bf16 beside its
// trainable one.
TEST(FrozenPlan, TheEstimateGivesFrozenParametersMastersAndGathersButNoGradientOrState) {
  usernet::Net net;
  freeze_some(net);
  cadre::FSDPModule fsdp = shard(net, cadre::Strategy::FullShard);
  cadre::EstimateInputs in;
  in.plan = fsdp.plan().regrouped(4);
  in.compute_bytes = 2;
  in.optimizer_bytes_per_param = 8;
  in.cpu = false;
  const cadre::MemoryEstimate e = cadre::estimate_memory(in);
  const int64_t S = in.plan.shard_numel(), F = in.plan.frozen_shard_numel();
  // A unit whole: the same unit's trainable and frozen flat parameters together.
  int64_t root = 0, largest = 0;
  for (const auto& f : in.plan.flats) {
    int64_t unit = 6 * f.padded;  // bf16 parameters and a float32 gradient
    for (const auto& frozen : in.plan.frozen)
      if (frozen.unit == f.unit) unit += 2 * frozen.padded;
    if (f.unit == "root") root = unit;
    else largest = std::max(largest, unit);
  }
  ASSERT_GT(root, 0);
  ASSERT_GT(largest, 0);
  EXPECT_EQ(e.params, 4 * S);
  EXPECT_EQ(e.frozen, 4 * F);
  EXPECT_EQ(e.grads, 4 * S);
  EXPECT_EQ(e.optimizer, 8 * S);
  EXPECT_EQ(e.gathered, root + 2 * largest);
  EXPECT_EQ(e.total(), e.params + e.frozen + e.grads + e.optimizer + e.gathered + e.unsharded);
  EXPECT_NE(e.to_text().find("frozen parameters"), std::string::npos) << e.to_text();

  // NO_SHARD keeps them whole, in one flat parameter, with a bf16 copy beside the master.
  usernet::Net whole;
  freeze_some(whole);
  cadre::FSDPModule ddp = shard(whole, cadre::Strategy::NoShard);
  in.plan = ddp.plan().regrouped(4);
  ASSERT_EQ(in.plan.frozen.size(), 1u);
  EXPECT_EQ(cadre::estimate_memory(in).frozen, (4 + 2) * in.plan.frozen_numel());
}

// train.freeze on a module: the matching parameters stop requiring grad (a shared tensor counted
// once); a pattern that matches none, or all of them in a run that trains, is refused by name.
TEST(FrozenPlan, FreezeMatchesNamesAndRefusesNothingOrEverything) {
  usernet::Net net;
  EXPECT_EQ(cadre::freeze_parameters(net, "^blocks\\.[01]\\.fc1\\.", true), 2 * (16 * 32 + 32));
  EXPECT_FALSE(net.blocks->ptr(0)->as<usernet::Block>()->fc1->weight.requires_grad());
  EXPECT_TRUE(net.blocks->ptr(2)->as<usernet::Block>()->fc1->weight.requires_grad());
  auto refusal = [&](const std::string& pattern, bool training) -> std::string {
    try {
      cadre::freeze_parameters(net, pattern, training);
    } catch (const cadre::ConfigError& e) {
      return e.what();
    }
    return "";
  };
  const std::string none = refusal("^nothing", true);
  EXPECT_NE(none.find("'^nothing' matches no parameter of the model (its names: "), std::string::npos) << none;
  EXPECT_NE(none.find("embed.weight"), std::string::npos) << none;
  EXPECT_NE(refusal(".", true).find("matches every parameter"), std::string::npos);
  EXPECT_EQ(refusal(".", false), "") << "a run that only loads may freeze everything";
}

}  // namespace
