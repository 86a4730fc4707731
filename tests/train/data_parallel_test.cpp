// Data parallel training (NO_SHARD) across processes: N ranks with batch B/N each follow the
// trajectory of one rank with batch B, step for step.
#include <gtest/gtest.h>

#include "support/order_spread.h"
#include "support/process.h"
#include "support/rank_processes.h"
#include "support/run_metrics.h"
#include "support/tiny_dataset.h"

namespace {

class DataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("dp");
    cadre::test::prepare_tiny_dataset(dir_->path(), 8, 30000);
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::vector<std::string> command(const std::string& run, int64_t batch, std::vector<std::string> sets) {
    return cadre::test::with_sets({CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                   "--set", "data.dir=" + (*dir_ / "data"), "--set", "run.dir=" + (*dir_ / run),
                                   "--set", "data.batch_size=" + std::to_string(batch), "--set", "train.steps=12",
                                   "--set", "train.threads=1", "--set", "train.eval_interval=6",
                                   "--set", "train.eval_batches=3"},
                                  sets);
  }

  static std::vector<double> losses(const std::string& run, const char* key = "loss") {
    return cadre::test::metric_values(*dir_ / (run + "/metrics.jsonl"), key);
  }

  // One rank with batch world*b against `world` ranks with batch b each, training and validation
  // losses within one rank's order spread (support/order_spread.h): one rank with the same
  // global batch as 2 and as `world` times as many micro-batches (the loss a mean over equal
  // micro-batches: the same function, other float32 sums).
  static void expect_same_trajectory(int world, int64_t b, std::vector<std::string> sets) {
    int64_t accum = 1;
    for (auto& s : sets)
      if (s.rfind("optim.grad_accum_steps=", 0) == 0) accum = std::stoll(s.substr(s.find('=') + 1));
    std::string one = "one-" + std::to_string(world), many = "many-" + std::to_string(world);
    auto single = cadre::test::run_process(command(one, world * b, sets), {}, 300);
    ASSERT_EQ(single.exit_code, 0) << single.output;
    std::vector<std::vector<double>> train_variants, val_variants;
    for (int parts : {2, world == 2 ? 4 : world}) {
      const std::string run = "one-" + std::to_string(world) + "-in-" + std::to_string(parts);
      auto split = sets;
      split.push_back("optim.grad_accum_steps=" + std::to_string(accum * parts));
      auto r = cadre::test::run_process(command(run, world * b / parts, split), {}, 300);
      ASSERT_EQ(r.exit_code, 0) << r.output;
      train_variants.push_back(losses(run));
      val_variants.push_back(losses(run, "val_loss"));
    }
    auto results = cadre::testing::run_ranks(world, command(many, b, sets));
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
    ASSERT_EQ(losses(one).size(), 12u);
    const std::string what = "[data_parallel] " + std::to_string(world) + " ranks vs 1 rank";
    cadre::test::OrderSpread(losses(one), train_variants).expect_follows(losses(many), what);
    // Validation is split across ranks too and must agree.
    ASSERT_EQ(losses(one, "val_loss").size(), 2u);
    cadre::test::OrderSpread(losses(one, "val_loss"), val_variants).expect_follows(losses(many, "val_loss"),
                                                                                   what + ", validation");
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* DataParallel::dir_ = nullptr;

}  // namespace

// float32: the ranks' gradient sums are split differently from one rank's (averaging two
// half-batch means instead of one mean), so agreement is to rounding, as the trajectory
// amplifies it: within one rank's order spread.
TEST_F(DataParallel, TwoRanksMatchOneRank) { expect_same_trajectory(2, 2, {}); }

TEST_F(DataParallel, ThreeRanksMatchOneRankWithAccumulation) {
  expect_same_trajectory(3, 2, {"optim.grad_accum_steps=2"});
}
