// Pipeline steps across real processes on loopback (pipeline_worker.cpp): 2 and 4 stages under
// GPipe, 1F1B and interleaved 1F1B (2 chunks per stage, the last stage sending back to the
// first) give each stage's gradients and the step's loss bit for bit as one process running the
// micro-batches one after another (the same micro-batch order of accumulation on every stage);
// so does Llama split into stages through its embed / run_blocks / head; stages that disagree on
// the schedule fail loudly instead of hanging.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "support/rank_processes.h"

namespace {

void expect_follows_one_process(int stages, const std::string& schedule, int chunks, int micro,
                                const char* worker = PIPELINE_WORKER) {
  const auto results = cadre::testing::run_ranks(stages, {worker, schedule, std::to_string(chunks), std::to_string(micro)});
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << cadre::testing::describe(results);
  EXPECT_NE(results.back().output.find(": 0 "), std::string::npos) << cadre::testing::describe(results);
}

TEST(Pipeline, StagesFollowOneProcessBitForBitUnderEverySchedule) {
  for (int stages : {2, 4}) {
    expect_follows_one_process(stages, "gpipe", 1, 4);
    expect_follows_one_process(stages, "1f1b", 1, 6);
    expect_follows_one_process(stages, "interleaved", 2, stages);  // one group of micro-batches: all warm-up
    expect_follows_one_process(stages, "interleaved", 2, 2 * stages);
  }
}

// Llama through its stage interface (embed, run_blocks, head): four blocks split by parameter
// count, each stage's parameters' gradients and the loss one process's bit for bit.
TEST(Pipeline, LlamaStagesFollowOneProcessBitForBit) {
  expect_follows_one_process(2, "1f1b", 1, 4, LLAMA_STAGE_WORKER);
  expect_follows_one_process(4, "gpipe", 1, 4, LLAMA_STAGE_WORKER);
  expect_follows_one_process(2, "interleaved", 2, 4, LLAMA_STAGE_WORKER);
}

// Stage 1 expects activations of another shape than stage 0 sends: the transfer's in-band check
// fails on both ends, naming the broadcast, and every rank exits non-zero with an error naming
// its own stage, the action it was in and the other stage.
TEST(Pipeline, StagesThatDisagreeFailLoudly) {
  cadre::testing::RankOptions options;
  options.env = [](int rank) { return rank == 1 ? std::vector<std::string>{"PIPELINE_ROWS=4"} : std::vector<std::string>{}; };
  options.limit = std::chrono::seconds(60);
  const auto results = cadre::testing::run_ranks(2, {PIPELINE_WORKER, "1f1b", "1", "4"}, options);
  ASSERT_EQ(results.size(), 2u);
  for (size_t rank = 0; rank < results.size(); ++rank) {
    const auto& r = results[rank];
    EXPECT_EQ(r.exit_code, 1) << cadre::testing::describe(results);
    EXPECT_NE(r.output.find("broadcast"), std::string::npos) << cadre::testing::describe(results);
    const std::string other = "stage " + std::to_string(1 - rank) + ": ";
    EXPECT_NE(r.output.find("pipeline stage " + std::to_string(rank) + " "), std::string::npos)
        << cadre::testing::describe(results);
    EXPECT_TRUE(r.output.find("from " + other) != std::string::npos || r.output.find("to " + other) != std::string::npos)
        << cadre::testing::describe(results);
  }
}

}  // namespace
