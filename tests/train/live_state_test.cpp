// In-memory recovery's hand-over of state (train/live_state.h) between two real ranks on
// loopback (live_state_worker): the rank with the most steps is the source, its model, moments,
// step, data position and its record of that step reach every rank that lacks them, and when
// every rank holds the state nothing crosses the network.
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
      R"(step (\d+) source (\d+) transferred (\d) position (\d+) optimizer_steps (\d+) checksum (\S+) record (.*))");
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

}  // namespace
