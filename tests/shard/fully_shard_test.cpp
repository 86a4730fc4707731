// fully_shard on a user's own network (user_net.h: ModuleList, Sequential, ModuleDict, a
// shared parameter, buffers, BatchNorm, a frozen parameter), across processes: every strategy
// (ZERO1 included) on 2 and 4 ranks follows one rank that reads the same global batch as micro-batches, step
// for step; gradient accumulation with no_sync; DDP buckets; buffers broadcast from rank 0.
//
// The one-rank reference accumulates N micro-batches because BatchNorm normalises each rank's
// batch with that batch's own statistics (as PyTorch DDP without SyncBatchNorm): N ranks of B
// samples compute exactly the gradients of one rank running N micro-batches of B.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "support/order_spread.h"
#include "support/rank_processes.h"

namespace {

using cadre::testing::describe;
using cadre::testing::run_ranks;

struct ShardRun {
  std::vector<double> losses;
  std::string output;  // rank 0's
  bool identical = false;
  long long units = 0, flat_params = 0;
};

ShardRun run(int world, const std::string& strategy, int accum, int64_t bucket = 0, int group = 0,
             const std::string& check = "") {
  auto results = run_ranks(world, {SHARD_WORKER, strategy, std::to_string(accum), "6", std::to_string(bucket),
                                   std::to_string(group), check});
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << strategy << " x" << world << "\n" << describe(results);
  ShardRun out;
  out.output = results[0].output;
  std::istringstream in(out.output);
  for (std::string word; in >> word;) {
    if (word == "loss") {
      double v;
      in >> v;
      out.losses.push_back(v);
    } else if (word == "identical") {
      int v;
      in >> v >> word >> out.units >> word >> out.flat_params;
      out.identical = v == 1;
    }
  }
  return out;
}

// float32, reductions grouped differently on N ranks than on one: agreement to rounding as the
// trajectory amplifies it, within the order spread (support/order_spread.h) of one rank reading
// its micro-batches in reverse order (measured ~1e-7 relative), far below what a wrong gradient
// moves (1e-2 and more). With 2 micro-batches the order cannot matter (a + b = b + a), and 2
// ranks add the same two gradients: what remains is the gradient norm summed by shard, a scalar
// a few ulps off, which the spread's ulps floor covers.
cadre::test::OrderSpread reference(int accum, const std::string& check = "") {
  const ShardRun one = run(1, "NO_SHARD", accum, 0, 0, check);
  EXPECT_EQ(one.losses.size(), 6u) << one.output;
  // The loss moves: the comparison is not between constants.
  if (!one.losses.empty()) {
    EXPECT_LT(one.losses.back(), one.losses.front()) << one.output;
  }
  const ShardRun reversed = run(1, "NO_SHARD", accum, 0, 0, check.empty() ? "reversed" : check + ",reversed");
  return cadre::test::OrderSpread(one.losses, {reversed.losses});
}

void expect_same(const cadre::test::OrderSpread& one, const ShardRun& many, const std::string& what) {
  ASSERT_EQ(many.losses.size(), 6u) << what << "\n" << many.output;
  one.expect_follows(many.losses, "[fully_shard] " + what);
  EXPECT_TRUE(many.identical) << what;
}

TEST(FullyShard, UserModuleStrategiesMatchOneRank) {
  const cadre::test::OrderSpread ref2 = reference(2), ref4 = reference(4);
  EXPECT_GT(ref4.spread(), 0.0) << "reversing 4 micro-batches changed no rounding at all";
  for (std::string s : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "ZERO1"}) expect_same(ref2, run(2, s, 1), s + " 2 ranks");
  expect_same(ref4, run(4, "FULL_SHARD", 1), "FULL_SHARD 4 ranks");
  expect_same(ref4, run(4, "ZERO1", 1), "ZERO1 4 ranks");
  expect_same(ref4, run(2, "ZERO1", 2), "ZERO1 2 ranks x 2 micro-batches (no_sync)");
  expect_same(ref4, run(4, "HYBRID_SHARD", 1, 0, 2), "HYBRID_SHARD 4 ranks (2 x 2)");
  expect_same(ref4, run(2, "FULL_SHARD", 2), "FULL_SHARD 2 ranks x 2 micro-batches (no_sync)");
  expect_same(ref4, run(2, "NO_SHARD", 2), "NO_SHARD 2 ranks x 2 micro-batches (no_sync)");
}

// bf16 compute, float32 reduction: sharded on the CPU the gradients wait for their
// reduce-scatter in bf16 and it widens them (the ring's float32 sums, unrounded); under no_sync
// the micro-batches add up in float32 beside them. One rank holds its gradients in float32 and
// reduces nothing: the same sums, so the runs agree as the float32 ones do (bf16 rounding of the
// sums, or of the accumulation across micro-batches, moves the losses by 1e-4 and more).
TEST(FullyShard, Bf16GradientsReducedInFloat32MatchOneRank) {
  const cadre::test::OrderSpread ref2 = reference(2, "bf16"), ref4 = reference(4, "bf16");
  expect_same(ref2, run(2, "FULL_SHARD", 1, 0, 0, "bf16"), "FULL_SHARD bf16 2 ranks");
  expect_same(ref4, run(2, "FULL_SHARD", 2, 0, 0, "bf16"), "FULL_SHARD bf16 2 ranks x 2 micro-batches (no_sync)");
  expect_same(ref4, run(4, "FULL_SHARD", 1, 0, 0, "bf16"), "FULL_SHARD bf16 4 ranks");
  expect_same(ref4, run(4, "HYBRID_SHARD", 1, 0, 2, "bf16"), "HYBRID_SHARD bf16 4 ranks (2 x 2)");
}

TEST(FullyShard, NoShardReducesInSizeBuckets) {
  const cadre::test::OrderSpread ref2 = reference(2);
  // 2 KiB buckets: the network's 3,000-odd float32 parameters need several.
  ShardRun small = run(2, "NO_SHARD", 1, 2048);
  expect_same(ref2, small, "NO_SHARD 2 ranks, 2 KiB buckets");
  EXPECT_GT(small.flat_params, 3) << small.output;
  ShardRun one_bucket = run(2, "NO_SHARD", 1);
  EXPECT_EQ(one_bucket.flat_params, 1) << one_bucket.output;  // under DDP's first 1 MiB bucket
}

TEST(FullyShard, BuffersBroadcastFromRankZeroInTraining) {
  for (std::string strategy : {"NO_SHARD", "FULL_SHARD"}) {
    auto results = run_ranks(2, {SHARD_WORKER, strategy, "1", "1", "0", "0", "buffers"});
    for (int r = 0; r < 2; ++r) {
      EXPECT_EQ(results[r].exit_code, 0) << describe(results);
      EXPECT_NE(results[r].output.find("rank " + std::to_string(r) + " scale 1\n"), std::string::npos)
          << strategy << ": rank " << r << " should hold rank 0's buffer\n" << describe(results);
    }
  }
}

// The unit a forward ends with (the head) runs its backward next: from the second step, when
// the order of the forward is known, it stays gathered into its backward instead of being
// freed and gathered again at once; after the backward every unit is sharded again.
TEST(FullyShard, TheUnitThatEndsTheForwardStaysGatheredIntoItsBackward) {
  auto results = run_ranks(2, {SHARD_WORKER, "FULL_SHARD", "1", "2", "0", "0", "kept"});
  for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << describe(results);
  const std::string& out = results[0].output;
  for (const char* line : {"step 1 after forward: root\n", "step 1 after backward:\n",
                           "step 2 after forward: heads.main root\n", "step 2 after backward:\n"})
    EXPECT_NE(out.find(line), std::string::npos) << "expected \"" << line << "\" in\n" << out;
}

// prefetch_next_forward after the optimizer step: the root's unit and the first unit of the
// forward are gathered before the next forward asks for them (after the backward none is), and
// the run still follows one rank step for step, under FULL_SHARD and ZeRO-1 (whose master is
// part of the buffer the gather fills).
TEST(FullyShard, PrefetchNextForwardGathersTheFirstUnitsAndKeepsTheTrajectory) {
  const cadre::test::OrderSpread ref2 = reference(2);
  for (std::string strategy : {"FULL_SHARD", "ZERO1"}) {
    const ShardRun prefetched = run(2, strategy, 1, 0, 0, "prefetch");
    expect_same(ref2, prefetched, strategy + " 2 ranks, prefetch_next_forward");
    if (strategy != "FULL_SHARD") continue;  // ZeRO-1 keeps every unit whole: nothing to see
    for (const char* line : {"step 1 after prefetch: blocks.0 root\n", "step 6 after prefetch: blocks.0 root\n"})
      EXPECT_NE(prefetched.output.find(line), std::string::npos) << "expected \"" << line << "\" in\n" << prefetched.output;
  }
}

// Called before the optimizer step, the prefetch sends the old parameters: the next forward
// refuses them, naming the unit, instead of computing with them; announced with mark_updated
// (as after loading a checkpoint), the step's parameters are gathered again and used.
TEST(FullyShard, PrefetchBeforeTheOptimizerStepIsRefusedUnlessMarkedUpdated) {
  expect_same(reference(2), run(2, "FULL_SHARD", 1, 0, 0, "prefetch_marked"),
              "FULL_SHARD 2 ranks, prefetch_next_forward, optimizer step, mark_updated");
  auto results = run_ranks(2, {SHARD_WORKER, "FULL_SHARD", "1", "3", "0", "0", "prefetch_early"});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << describe(results);
    EXPECT_NE(r.output.find("changed in place while their all-gather was in flight"), std::string::npos)
        << describe(results);
  }
}

// Frozen parameters (the input layer and each block's first layer: requires_grad off) are
// sharded like the trainable ones, with no gradient and no optimizer state: every strategy
// follows one rank; each rank keeps 1/N of them and its pieces still hold their initial values
// after training; and a block's frozen parameters are freed once the backward is past it (when
// its input's gradient is complete), not at the end of the backward: at block i's input
// gradient no block j >= i holds them gathered, while block i - 1, whose backward is next, does
// (block 0's input, the frozen input layer's output, needs no gradient).
TEST(FullyShard, FrozenParametersAreShardedAndFreedAfterTheirUnitsBackward) {
  const cadre::test::OrderSpread ref2 = reference(2, "frozen"), ref4 = reference(4, "frozen");
  for (std::string s : {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "ZERO1"})
    expect_same(ref2, run(2, s, 1, 0, 0, "frozen"), s + " 2 ranks, frozen layers");
  expect_same(ref4, run(2, "FULL_SHARD", 2, 0, 0, "frozen"), "FULL_SHARD 2 ranks x 2 micro-batches, frozen layers");
  expect_same(ref4, run(4, "HYBRID_SHARD", 1, 0, 2, "frozen"), "HYBRID_SHARD 4 ranks (2 x 2), frozen layers");

  auto results = run_ranks(2, {SHARD_WORKER, "FULL_SHARD", "1", "2", "0", "0", "frozen"});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(results[r].exit_code, 0) << describe(results);
    const std::string& out = results[r].output;
    long long kept = 0, padded = 0;
    size_t flats = 0;
    const size_t at = out.find("rank " + std::to_string(r) + " frozen unchanged 1 kept ");
    ASSERT_NE(at, std::string::npos) << "rank " << r << "'s frozen pieces changed or were not reported\n" << out;
    ASSERT_EQ(std::sscanf(out.c_str() + at, "rank %*d frozen unchanged 1 kept %lld of %lld in %zu", &kept, &padded, &flats), 3);
    EXPECT_EQ(flats, 4u) << out;  // three blocks and the root (the input layer)
    EXPECT_GT(kept, 0) << out;
    EXPECT_EQ(2 * kept, padded) << "each of 2 ranks keeps half of every frozen flat parameter\n" << out;
  }
  const std::string& out = results[0].output;
  for (int i = 1; i < 3; ++i) {
    const std::string prefix = "backward blocks." + std::to_string(i) + " input: frozen gathered:";
    const size_t at = out.find(prefix);
    ASSERT_NE(at, std::string::npos) << "no report at block " << i << "'s input gradient\n" << out;
    const std::string gathered = out.substr(at + prefix.size(), out.find('\n', at) - at - prefix.size());
    for (int j = i; j < 3; ++j)
      EXPECT_EQ(gathered.find("blocks." + std::to_string(j)), std::string::npos)
          << "block " << j << " still holds its frozen parameters at block " << i << "'s input gradient:" << gathered;
    EXPECT_NE(gathered.find("blocks." + std::to_string(i - 1)), std::string::npos)
        << "block " << i - 1 << " (next in the backward) should be gathered:" << gathered;
  }
}

TEST(FullyShard, UnitCalledOutsideItsRootIsRefused) {
  auto results = run_ranks(1, {SHARD_WORKER, "FULL_SHARD", "1", "1", "0", "0", "outside"});
  EXPECT_EQ(results[0].exit_code, 1) << results[0].output;
  EXPECT_NE(results[0].output.find("outside the forward of its root"), std::string::npos) << results[0].output;
}

}  // namespace
