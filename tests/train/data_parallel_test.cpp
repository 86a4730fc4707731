// Data parallel training (NO_SHARD) across processes: N ranks with batch B/N each follow the
// trajectory of one rank with batch B, step for step.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "support/rank_processes.h"
#include "support/tiny_dataset.h"
#include "support/process.h"

namespace {

class DataParallel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("dp");
    cadre::test::prepare_tiny_dataset(dir_->path(), 8, 30000);
  }
  static void TearDownTestSuite() { delete dir_; }

  static std::vector<std::string> command(const std::string& run, int64_t batch, std::vector<std::string> sets) {
    std::vector<std::string> argv = {CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                     "--set", "data.dir=" + (*dir_ / "data"), "--set", "run.dir=" + (*dir_ / run),
                                     "--set", "data.batch_size=" + std::to_string(batch), "--set", "train.steps=12",
                                     "--set", "train.threads=1", "--set", "train.eval_interval=6",
                                     "--set", "train.eval_batches=3"};
    for (auto& s : sets) {
      argv.push_back("--set");
      argv.push_back(s);
    }
    return argv;
  }

  static std::vector<double> losses(const std::string& run, const char* key = "loss") {
    std::vector<double> out;
    std::ifstream in(*dir_ / (run + "/metrics.jsonl"));
    for (std::string line; std::getline(in, line);) {
      auto record = nlohmann::json::parse(line);
      if (record.contains(key)) out.push_back(record[key].get<double>());
    }
    return out;
  }

  // One rank with batch world*b against `world` ranks with batch b each.
  static void expect_same_trajectory(int world, int64_t b, std::vector<std::string> sets, double tolerance) {
    std::string one = "one-" + std::to_string(world), many = "many-" + std::to_string(world);
    auto single = cadre::test::run_process(command(one, world * b, sets), {}, 300);
    ASSERT_EQ(single.exit_code, 0) << single.output;
    auto results = cadre::testing::run_ranks(world, command(many, b, sets));
    for (const auto& r : results) ASSERT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
    auto a = losses(one), m = losses(many);
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(m.size(), 12u);
    for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(m[i], a[i], tolerance * a[i]) << "step " << i + 1;
    // Validation is split across ranks too and must agree.
    auto va = losses(one, "val_loss"), vm = losses(many, "val_loss");
    ASSERT_EQ(va.size(), 2u);
    ASSERT_EQ(vm.size(), 2u);
    for (size_t i = 0; i < va.size(); ++i) EXPECT_NEAR(vm[i], va[i], tolerance * va[i]) << "validation " << i + 1;
  }

  static cadre::test::TempDir* dir_;
};
cadre::test::TempDir* DataParallel::dir_ = nullptr;

}  // namespace

// float32: the ranks' gradient sums are split differently from one rank's (averaging two
// half-batch means instead of one mean), so agreement is to rounding, 1e-5 relative.
TEST_F(DataParallel, TwoRanksMatchOneRank) { expect_same_trajectory(2, 2, {}, 1e-5); }

TEST_F(DataParallel, ThreeRanksMatchOneRankWithAccumulation) {
  expect_same_trajectory(3, 2, {"optim.grad_accum_steps=2"}, 1e-5);
}
