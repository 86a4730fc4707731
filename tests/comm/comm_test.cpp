// Communicator behaviour with 2, 3 and 4 real processes on loopback: every op and dtype on odd
// and zero sizes, sub-groups, sizes and ops that differ across ranks, ranks out of step, and a
// rank that never arrives, and an op aborted from another thread.
#include <gtest/gtest.h>

#include "support/rank_processes.h"

namespace {

using cadre::testing::describe;
using cadre::testing::run_ranks;

void expect_all_pass(int ranks, const std::string& scenario) {
  auto results = run_ranks(ranks, {COMM_WORKER, scenario});
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << describe(results);
    EXPECT_NE(results[r].output.find("PASS " + scenario), std::string::npos) << describe(results);
  }
}

TEST(Communicator, EveryOpAndDtypeWith2Ranks) { expect_all_pass(2, "ops"); }
TEST(Communicator, EveryOpAndDtypeWith3Ranks) { expect_all_pass(3, "ops"); }
TEST(Communicator, EveryOpAndDtypeWith4Ranks) { expect_all_pass(4, "ops"); }
TEST(Communicator, BlocksOfManyWindowsReduceExactlyWithoutABlockSizedBuffer) { expect_all_pass(2, "large_blocks"); }
TEST(Communicator, BlocksOfManyWindowsReduceExactlyWith3Ranks) { expect_all_pass(3, "large_blocks"); }

TEST(Communicator, SizesDifferingAcrossRanksFailClearlyWith2Ranks) { expect_all_pass(2, "mismatch"); }
TEST(Communicator, SizesDifferingAcrossRanksFailClearlyWith3Ranks) { expect_all_pass(3, "mismatch"); }

TEST(Communicator, RanksOutOfStepFailAtOnceAndRebuildRecovers) { expect_all_pass(2, "out_of_step"); }

TEST(Communicator, MissingRankIsNamedAndRebuildRecoversWith2Ranks) { expect_all_pass(2, "missing"); }
TEST(Communicator, MissingRankIsNamedAndRebuildRecoversWith3Ranks) { expect_all_pass(3, "missing"); }

TEST(Communicator, AbortEndsTheOpInFlightAtOnceAndRebuildRecovers) { expect_all_pass(2, "abort"); }

}  // namespace

// The store on MASTER_PORT is authenticated: a rank with another job secret is refused by
// rank 0's store (and says so), and a rank with none is told where a secret comes from.
TEST(Communicator, RanksWithoutTheJobSecretAreRefused) {
  cadre::testing::RankOptions options;
  options.env = [](int rank) {
    return rank == 1 ? std::vector<std::string>{"CADRE_JOB_SECRET=a-secret-of-another-job-0123"}
                     : std::vector<std::string>{};
  };
  options.limit = std::chrono::seconds(20);  // rank 0 waits for rank 1 until its 5 s timeout
  auto results = run_ranks(2, {COMM_WORKER, "refused"}, options);
  EXPECT_NE(results[1].exit_code, 0) << results[1].output;
  EXPECT_NE(results[1].output.find("wrong job secret"), std::string::npos) << results[1].output;
  EXPECT_NE(results[0].exit_code, 0) << results[0].output;  // left waiting for rank 1

  options.env = [](int rank) { return std::vector<std::string>{"CADRE_JOB_SECRET="}; };
  results = run_ranks(2, {COMM_WORKER, "refused"}, options);
  for (const auto& r : results) EXPECT_NE(r.output.find("needs the job secret"), std::string::npos) << r.output;
}
