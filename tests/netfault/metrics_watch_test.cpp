// MetricsWatch splits metrics.jsonl into one segment per stretch of training, whichever way a
// restarted round touches the file: a fresh start rewrites it, a resume cuts it back to the
// checkpoint's step and appends, and a caller that saw a new round can force a segment.
#include <gtest/gtest.h>

#include <fstream>

#include "netfault/metrics_watch.h"
#include "support/process.h"

using cadre::netfault::MetricsWatch;

namespace {

std::string records(int from, int to, double loss) {
  std::string out;
  for (int s = from; s <= to; ++s)
    out += "{\"step\": " + std::to_string(s) + ", \"loss\": " + std::to_string(loss + s) + "}\n";
  return out;
}

std::vector<std::pair<int64_t, int64_t>> spans(const MetricsWatch& w) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const auto& s : w.segments()) out.emplace_back(s.first_step(), s.last_step());
  return out;
}

class MetricsWatchTest : public ::testing::Test {
 protected:
  void write(const std::string& text) { std::ofstream(path) << text; }
  cadre::test::TempDir dir{"metrics-watch"};
  std::string path = dir / "metrics.jsonl";
  MetricsWatch watch{path};
};

TEST_F(MetricsWatchTest, NoFileYetIsNothing) {
  EXPECT_FALSE(watch.poll());
  EXPECT_TRUE(watch.segments().empty());
}

TEST_F(MetricsWatchTest, AppendedStepsExtendOneSegmentAndAPartialLineWaits) {
  write(records(1, 3, 5.0) + "{\"step\": 4, \"lo");
  EXPECT_TRUE(watch.poll());
  write(records(1, 5, 5.0));
  EXPECT_TRUE(watch.poll());
  EXPECT_FALSE(watch.poll());
  EXPECT_EQ(spans(watch), (std::vector<std::pair<int64_t, int64_t>>{{1, 5}}));
  EXPECT_DOUBLE_EQ(watch.segments()[0].steps[3].loss, 9.0);
}

TEST_F(MetricsWatchTest, FreshRestartRewritingTheFileStartsASegment) {
  write(records(1, 7, 5.0));
  watch.poll();
  write(records(1, 2, 7.0));
  watch.poll();
  EXPECT_EQ(spans(watch), (std::vector<std::pair<int64_t, int64_t>>{{1, 7}, {1, 2}}));
}

TEST_F(MetricsWatchTest, ResumeCuttingBackToTheCheckpointStepStartsASegment) {
  write(records(1, 8, 5.0));
  watch.poll();
  write(records(1, 5, 5.0));  // cut back to the checkpoint of step 5: nothing new
  EXPECT_FALSE(watch.poll());
  write(records(1, 5, 5.0) + records(6, 7, 6.0));
  watch.poll();
  EXPECT_EQ(spans(watch), (std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {6, 7}}));
}

// A fast resumed round cut the file back to step 5 and trained to step 30 between two polls
// (NetFault.CutHostCaughtByCommTimeoutWhenHeartbeatsAreSlow once read it as a restart from step 1).
TEST_F(MetricsWatchTest, ResumeCutBackAndAppendedBetweenTwoPollsStartsAfterTheKeptLines) {
  write(records(1, 8, 5.0));
  watch.poll();
  write(records(1, 5, 5.0) + records(6, 30, 6.0));
  watch.poll();
  EXPECT_EQ(spans(watch), (std::vector<std::pair<int64_t, int64_t>>{{1, 8}, {6, 30}}));
}

TEST_F(MetricsWatchTest, ResumeAtTheLastStepSeenNeedsTheCallersHint) {
  write(records(1, 5, 5.0));
  watch.poll();
  watch.start_segment();  // a new round began; the file did not change
  write(records(1, 5, 5.0) + records(6, 6, 6.0));
  watch.poll();
  EXPECT_EQ(spans(watch), (std::vector<std::pair<int64_t, int64_t>>{{1, 5}, {6, 6}}));
}

TEST_F(MetricsWatchTest, BadRecordNamesTheFile) {
  write("{\"loss\": 1}\n");
  try {
    watch.poll();
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

}  // namespace
