// Sharded in-memory recovery between real ranks on loopback (peer_copies_worker): each rank's
// part of a FULL_SHARD model and its AdamW moments reach a buddy's memory, and a group of another
// size (or with a newcomer) rebuilds its own parts from the copies the survivors hold, every
// element in its place (frozen parameters too, kept in bf16 as a LoRA base is), with the step,
// data position, optimizer steps, global batch, record and each rank's RNG; when some part's
// every copy is gone nothing is adopted (resume from disk).
#include <gtest/gtest.h>

#include <map>
#include <regex>

#include "support/process.h"
#include "support/rank_processes.h"
#include "support/tiny_dataset.h"

namespace {

struct Adopted {
  bool found = false, nothing = false;
  long step = -1, owners = -1, stages = -1, position = -1, optimizer_steps = -1, micro_batches = -1,
       transferred = -1, rng = -1, wrong = -1;
  std::string record;
};

Adopted adopted(const std::string& output) {
  static const std::regex line(
      R"(adopted step (\d+) owners (\d+) stages (\d+) position (\d+) optimizer_steps (\d+) )"
      R"(micro_batches (\d+) transferred (\d) )"
      R"(rng (\d+) wrong (\d+) record (.*))");
  std::smatch m;
  Adopted a;
  a.nothing = output.find("nothing adopted") != std::string::npos;
  if (!std::regex_search(output, m, line)) return a;
  a.found = true;
  a.step = std::stol(m[1]);
  a.owners = std::stol(m[2]);
  a.stages = std::stol(m[3]);
  a.position = std::stol(m[4]);
  a.optimizer_steps = std::stol(m[5]);
  a.micro_batches = std::stol(m[6]);
  a.transferred = std::stol(m[7]);
  a.rng = std::stol(m[8]);
  a.wrong = std::stol(m[9]);
  a.record = m[10];
  return a;
}

// The old ranks' next random numbers after packing, by old rank.
std::map<int, long> old_rng(const std::vector<cadre::testing::RankResult>& results) {
  static const std::regex line(R"(rank (\d+): rng (\d+))");
  std::map<int, long> out;
  for (const auto& r : results)
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line); it != std::sregex_iterator(); ++it)
      out[std::stoi((*it)[1])] = std::stol((*it)[2]);
  return out;
}

class PeerCopiesRecovery : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new cadre::test::TempDir("peer-copies");
    data_ = cadre::test::prepare_tiny_dataset(dir_->path(), 2, 20000);
  }
  static void TearDownTestSuite() { delete dir_; }
  std::vector<cadre::testing::RankResult> run(int processes, const std::string& scenario,
                                              const std::string& strategy = "FULL_SHARD",
                                              const std::string& option = "") {
    std::vector<std::string> argv = {PEER_COPIES_WORKER, data_, scenario, std::to_string(cadre::testing::free_port()),
                                     strategy};
    if (!option.empty()) argv.push_back(option);
    auto results = cadre::testing::run_ranks(processes, argv);
    for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << r.output;
    return results;
  }
  // Every rank of the new group holds its part exactly, at step 7, with the old group's scalars
  // and the RNG of old rank (new rank mod old world); `stages`: the pipeline stages (0: none).
  void expect_adopted(const std::vector<cadre::testing::RankResult>& results, int new_world, int old_world,
                      int stages = 0) {
    const std::map<int, long> rng = old_rng(results);
    ASSERT_EQ(rng.size(), size_t(old_world));
    for (int r = 0; r < new_world; ++r) {
      const Adopted a = adopted(results[r].output);
      ASSERT_TRUE(a.found) << results[r].output;
      EXPECT_EQ(a.wrong, 0) << "rank " << r << ": elements not where they belong\n" << results[r].output;
      EXPECT_EQ(a.step, 7);
      EXPECT_EQ(a.owners, old_world);
      EXPECT_EQ(a.stages, stages);
      EXPECT_EQ(a.position, 107);
      EXPECT_EQ(a.optimizer_steps, 7);
      EXPECT_EQ(a.micro_batches, 6);
      EXPECT_EQ(a.record, "{\"step\":7,\"rank\":0}") << "rank 0's record comes along";
      EXPECT_EQ(a.rng, rng.at(r % old_world)) << "rank " << r << "'s random numbers";
    }
  }
  static cadre::test::TempDir* dir_;
  static std::string data_;
};
cadre::test::TempDir* PeerCopiesRecovery::dir_ = nullptr;
std::string PeerCopiesRecovery::data_;

TEST_F(PeerCopiesRecovery, TwoSurvivorsRebuildThreeRanksPartsFromTheirCopies) {
  auto results = run(3, "shrink");
  EXPECT_NE(results[0].output.find("holds 2 copies (buddy 1, giver 2)"), std::string::npos) << results[0].output;
  expect_adopted(results, 2, 3);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(adopted(results[r].output).transferred, 1);
}

TEST_F(PeerCopiesRecovery, ANewcomerReceivesItsPartWhenTheGroupGrows) {
  expect_adopted(run(3, "grow"), 3, 2);
}

TEST_F(PeerCopiesRecovery, AReplacedRankGetsItsPartFromItsBuddysCopy) {
  expect_adopted(run(3, "replace"), 3, 3);
}

// The other sharded strategies stage their parts the same way: SHARD_GRAD_OP's and ZERO1's
// shards, and HYBRID_SHARD's units spread over the replicas that hold them (shard groups of 1:
// each unit staged by one replica only, so coverage needs every rank's copy).
TEST_F(PeerCopiesRecovery, ShardGradOpPartsSurviveAShrink) { expect_adopted(run(3, "shrink", "SHARD_GRAD_OP"), 2, 3); }
TEST_F(PeerCopiesRecovery, Zero1PartsSurviveAShrink) { expect_adopted(run(3, "shrink", "ZERO1"), 2, 3); }
TEST_F(PeerCopiesRecovery, HybridShardPartsReachANewcomer) { expect_adopted(run(3, "grow", "HYBRID_SHARD"), 3, 2); }
// A LoRA base is kept in bf16 (FullyShardOptions::frozen_in_compute_dtype): its parts travel as
// bf16 and land where they belong.
TEST_F(PeerCopiesRecovery, FrozenPartsKeptInBf16SurviveAShrink) {
  expect_adopted(run(3, "shrink", "FULL_SHARD", "bf16-frozen"), 2, 3);
}

// Pipeline stages (issue #53): all of stage 1 is lost (ranks 2 and 3 of pp 2 x dp 2) and rank 1,
// which held stage 0, now holds stage 1: it fills its part from the copies of stage 1's ranks
// (its own of rank 3, rank 0's of rank 2) and takes nothing else from its own stage-0 part, which
// rank 0 receives. Each stage's elements carry its tag: a part filled from the other stage's
// copies, or twice, fails. Stage 1 mirrors one of stage 0's parameters (a tied table), which
// stage 1's copies leave out: it comes from stage 0's copies.
TEST_F(PeerCopiesRecovery, EachStageFillsItsPartFromItsOwnStagesCopies) {
  auto results = run(4, "stages");
  EXPECT_NE(results[1].output.find("holds 2 copies (buddy 3, giver 3)"), std::string::npos) << results[1].output;
  expect_adopted(results, 2, 4, /*stages=*/2);
}

TEST_F(PeerCopiesRecovery, NothingIsAdoptedWhenEveryCopyOfAPartIsGone) {
  auto results = run(3, "copies_lost");
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(adopted(results[r].output).nothing) << results[r].output;
    EXPECT_FALSE(adopted(results[r].output).found) << results[r].output;
  }
}

}  // namespace
