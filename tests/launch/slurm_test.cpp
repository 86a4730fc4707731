// Slurm host list and count parsing, and reading an srun step's environment.
#include <gtest/gtest.h>

#include <map>

#include "core/error.h"
#include "launch/slurm.h"

using cadre::ConfigError;
using cadre::launch::slurm_counts_expand;
using cadre::launch::slurm_hostlist_expand;
using cadre::launch::slurm_launch_from_env;

using Hosts = std::vector<std::string>;

TEST(SlurmHostlist, PlainNamesAndRanges) {
  EXPECT_EQ(slurm_hostlist_expand("n1"), Hosts{"n1"});
  EXPECT_EQ(slurm_hostlist_expand("n1,n2"), (Hosts{"n1", "n2"}));
  EXPECT_EQ(slurm_hostlist_expand("n[1-3,7]"), (Hosts{"n1", "n2", "n3", "n7"}));
  EXPECT_EQ(slurm_hostlist_expand("n[1-2]"), (Hosts{"n1", "n2"}));
}

TEST(SlurmHostlist, ZeroPaddingSuffixesAndSeveralGroups) {
  EXPECT_EQ(slurm_hostlist_expand("gpu[08-11]"), (Hosts{"gpu08", "gpu09", "gpu10", "gpu11"}));
  EXPECT_EQ(slurm_hostlist_expand("gpu[01-02]-ib,login"), (Hosts{"gpu01-ib", "gpu02-ib", "login"}));
  EXPECT_EQ(slurm_hostlist_expand("r[1-2]n[3,5]"), (Hosts{"r1n3", "r1n5", "r2n3", "r2n5"}));
  EXPECT_EQ(slurm_hostlist_expand("a[1],b[2-3],c"), (Hosts{"a1", "b2", "b3", "c"}));
}

TEST(SlurmHostlist, MalformedListsAreConfigErrors) {
  for (std::string bad : {"", "n[1-3", "n1-3]", "n[]", "n[3-1]", "n[a-b]", "n[1-2],", "n[[1]]"})
    EXPECT_THROW(slurm_hostlist_expand(bad), ConfigError) << bad;
}

TEST(SlurmCounts, RepeatsAndLists) {
  EXPECT_EQ(slurm_counts_expand("2(x2)"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(slurm_counts_expand("4"), (std::vector<int64_t>{4}));
  EXPECT_EQ(slurm_counts_expand("2(x3),1"), (std::vector<int64_t>{2, 2, 2, 1}));
  EXPECT_EQ(slurm_counts_expand("1,3(x1)"), (std::vector<int64_t>{1, 3}));
  for (std::string bad : {"", "x", "2(x)", "2(x2", "2(y2)", "-1"}) EXPECT_THROW(slurm_counts_expand(bad), ConfigError) << bad;
}

TEST(SlurmEnv, SrunStepGivesNodeCountRankAndFirstHost) {
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "42"}, {"SLURM_STEP_ID", "0"},
                                            {"SLURM_JOB_NODELIST", "n[1-2]"}, {"SLURM_NODEID", "1"},
                                            {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}};
  auto get = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  auto s = slurm_launch_from_env(get);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->job_id, "42");
  EXPECT_EQ(s->nnodes, 2);
  EXPECT_EQ(s->node_rank, 1);
  EXPECT_EQ(s->first_host, "n1");
  EXPECT_EQ(s->tasks_on_this_node, 1);
  EXPECT_EQ(s->port, 29500 + 42);

  env["SLURM_STEP_NODELIST"] = "n[5,7-8]";  // the step's nodes win over the job's
  env["SLURM_STEP_TASKS_PER_NODE"] = "1,2(x2)";
  s = slurm_launch_from_env(get);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->nnodes, 3);
  EXPECT_EQ(s->first_host, "n5");
  EXPECT_EQ(s->tasks_on_this_node, 2);

  env["SLURM_NODEID"] = "3";
  EXPECT_THROW(slurm_launch_from_env(get), ConfigError);

  env.erase("SLURM_STEP_ID");  // a batch script, not an srun step
  EXPECT_FALSE(slurm_launch_from_env(get));
}
