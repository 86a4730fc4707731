// In-memory recovery's hand-over of state (train/live_state.h) between two real ranks on
// loopback (live_state_worker): the rank with the most steps is the source, its model, moments,
// step, data position and its record of that step reach every rank that lacks them, and when
// every rank holds the state nothing crosses the network. Under pipeline stages (four ranks, pp
// 2 x dp 2) each stage's state comes from its own survivors, or the group resumes from disk.
#include <gtest/gtest.h>

#include <regex>

#include "support/process.h"
#include "support/rank_processes.h"
#include "support/tiny_dataset.h"

namespace {

struct Held {
  int step = -1, source = -1, transferred = -1;
  long position = -1, optimizer_steps = -1;
  double checksum = 0;
  std::string record;
};

Held held(const std::string& output) {
  static const std::regex line(
      R"(step (\d+) source (-?\d+) transferred (\d) position (\d+) optimizer_steps (\d+) checksum (\S+) record (.*))");
  std::smatch m;
  Held h;
  if (!std::regex_search(output, m, line)) return h;
  h.step = std::stoi(m[1]);
  h.source = std::stoi(m[2]);
  h.transferred = std::stoi(m[3]);
  h.position = std::stol(m[4]);
  h.optimizer_steps = std::stol(m[5]);
  h.checksum = std::stod(m[6]);
  h.record = m[7];
  return h;
}

class LiveStateHandOver : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("live-state");
    data_ = cadre::test::prepare_tiny_dataset(dir_->path(), 2, 20000);
  }
  static void TearDownTestSuite() { delete dir_; }
  std::vector<Held> run(const std::string& scenario) {
    auto results = cadre::testing::run_ranks(2, {LIVE_STATE_WORKER, data_, scenario});
    std::vector<Held> out;
    for (const auto& r : results) {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      out.push_back(held(r.output));
      EXPECT_GE(out.back().step, 0) << r.output;
    }
    return out;
  }
  // Four ranks as pp 2 x dp 2: each rank's output.
  std::vector<std::string> run_stages(const std::string& scenario) {
    auto results = cadre::testing::run_ranks(4, {LIVE_STATE_WORKER, data_, scenario});
    std::vector<std::string> out;
    for (const auto& r : results) {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      out.push_back(r.output);
    }
    return out;
  }
  static cadre::test::TempDir* dir_;
  static std::string data_;
};
cadre::test::TempDir* LiveStateHandOver::dir_ = nullptr;
std::string LiveStateHandOver::data_;

// Rank 1 finished step 5, rank 0 only step 4: rank 0 takes rank 1's state, and rank 1's record of
// step 5 (rank 0, which writes metrics.jsonl, never wrote one).
TEST_F(LiveStateHandOver, TheMostAdvancedRankIsTheSourceAndItsRecordComesAlong) {
  auto h = run("one_behind");
  ASSERT_EQ(h.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h[r].step, 5) << "rank " << r;
    EXPECT_EQ(h[r].source, 1) << "rank " << r;
    EXPECT_EQ(h[r].transferred, 1) << "rank " << r;
    EXPECT_EQ(h[r].position, 105) << "rank " << r;
    EXPECT_EQ(h[r].optimizer_steps, 5) << "rank " << r;
    EXPECT_EQ(h[r].record, "{\"step\":5,\"rank\":1}") << "rank " << r;
  }
  EXPECT_GT(h[1].checksum, 0);  // its own state back (filled with 2; the fresh model was zeroed)
  EXPECT_EQ(h[0].checksum, h[1].checksum) << "rank 0 did not receive rank 1's state";
}

TEST_F(LiveStateHandOver, ANewcomerReceivesEverything) {
  auto h = run("newcomer");
  ASSERT_EQ(h.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h[r].source, 0) << "rank " << r;
    EXPECT_EQ(h[r].transferred, 1) << "rank " << r;
    EXPECT_EQ(h[r].position, 105) << "rank " << r;
    EXPECT_EQ(h[r].record, "{\"step\":5,\"rank\":0}") << "rank " << r;
  }
  EXPECT_GT(h[0].checksum, 0);
  EXPECT_EQ(h[1].checksum, h[0].checksum);
}

TEST_F(LiveStateHandOver, NothingCrossesTheNetworkWhenEveryRankHoldsTheState) {
  auto h = run("all_hold");
  ASSERT_EQ(h.size(), 2u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(h[r].transferred, 0) << "rank " << r;
    EXPECT_EQ(h[r].source, 0) << "rank " << r;
    EXPECT_EQ(h[r].record, "{\"step\":5,\"rank\":" + std::to_string(r) + "}") << "each keeps its own record";
  }
  EXPECT_EQ(h[0].checksum, h[1].checksum);
}

// Rank 1 carried stage 1 but now holds stage 0, and rank 2 is new: each takes its new stage's
// state from that stage's survivor. Ranks 0 and 1 hold stage 0's (filled with 1), ranks 2 and
// 3 stage 1's (filled with 3); what rank 1 carried serves nobody.
TEST_F(LiveStateHandOver, EachPipelineStageTakesItsStateFromItsOwnSurvivors) {
  const std::vector<std::string> out = run_stages("stage_moved");
  ASSERT_EQ(out.size(), 4u);
  std::vector<Held> h;
  for (const std::string& o : out) h.push_back(held(o));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(h[r].step, 5) << out[r];
    EXPECT_EQ(h[r].source, -1) << "no single source: " << out[r];
    EXPECT_EQ(h[r].transferred, 1) << out[r];
    EXPECT_EQ(h[r].position, 105) << out[r];
    EXPECT_EQ(h[r].optimizer_steps, 5) << out[r];
  }
  EXPECT_GT(h[0].checksum, 0);
  EXPECT_EQ(h[1].checksum, h[0].checksum) << "rank 1 kept the stage it carried";
  EXPECT_EQ(h[2].checksum, h[3].checksum) << "the newcomer did not receive stage 1";
  // Three times stage 0's sum exactly; each is printed to 6 digits.
  EXPECT_NEAR(h[2].checksum, 3 * h[0].checksum, 1e-4 * h[2].checksum) << "stage 1 holds another stage's state";
  // Rank 0 writes metrics.jsonl: its record is its own stage's.
  EXPECT_EQ(h[0].record, "{\"step\":5,\"rank\":0}");
  EXPECT_EQ(h[2].record, "{\"step\":5,\"rank\":3}");
}

// Where some stage cannot go on from memory no rank adopts anything (the group resumes from
// disk), and rank 0 says why.
TEST_F(LiveStateHandOver, PipelineStagesThatCannotGoOnFromMemoryResumeFromDisk) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"stage_lost", "no live rank holds stage 1"},
      {"stages_apart", "stage 0's survivors completed step 5 and stage 1's step 4"},
      {"stage_elsewhere", "none of stage 1's new ranks (2..3) holds its state of step 5"}};
  for (const auto& [scenario, why] : cases) {
    const std::vector<std::string> out = run_stages(scenario);
    ASSERT_EQ(out.size(), 4u);
    for (int r = 0; r < 4; ++r)
      EXPECT_NE(out[r].find("nothing adopted: resumes from disk"), std::string::npos) << scenario << ": " << out[r];
    EXPECT_NE(out[0].find(why), std::string::npos) << scenario << ": " << out[0];
  }
}

}  // namespace
