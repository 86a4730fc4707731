// The agent's exit code for a batch script: which give-ups count as bad input (2), and where
// --exit-code-file's "%n" points on a Slurm node, a ranked node and an unranked one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <string>

#include "launch/error_file.h"
#include "launch/exit_code_file.h"

using namespace cadre::launch;

TEST(FailureExitCode, OnlyAWorkersExitTwoIsBadInput) {
  EXPECT_EQ(failure_exit_code(R"({"rank": 1, "exit_code": 2, "reason": "exit code 2"})"), 2);
  EXPECT_EQ(failure_exit_code(R"({"rank": 1, "exit_code": 1})"), 1);
  EXPECT_EQ(failure_exit_code(R"({"rank": 1, "exit_code": 3})"), 1);
  EXPECT_EQ(failure_exit_code(R"({"rank": 1, "signal": 9})"), 1);  // a SIGKILL is a crash
  EXPECT_EQ(failure_exit_code(R"({"rank": 1, "exit_code": "2"})"), 1);  // not a number: not a worker's code
  EXPECT_EQ(failure_exit_code(""), 1);  // no failure recorded (a lost node)
  EXPECT_EQ(failure_exit_code("not json"), 1);
}

TEST(FailureExitCode, AStallIsAFailureWithTheHangAttached) {
  FailureContext context{"host-a", 0, 3, 1, ""};
  const std::string j = stall_failure_to_json(1, 1, 4242, "stall: rank 1 had no collective activity for 2.5 s",
                                              R"({"seq": 7, "missing_ranks": [1]})", context);
  EXPECT_EQ(failure_exit_code(j), 1);
  const std::string summary = failure_summary(j);
  EXPECT_NE(summary.find("rank 1 (local rank 1 on host-a, pid 4242) failed with stall: rank 1 had no collective"),
            std::string::npos) << summary;
  EXPECT_NE(j.find(R"("hang":{"missing_ranks":[1],"seq":7})"), std::string::npos) << j;
  EXPECT_EQ(stall_failure_to_json(0, 0, 1, "stall", "", context).find("hang"), std::string::npos);
}

TEST(ExitCodeFile, PercentNIsTheSlurmNodeIdThenTheNodeRankThenTheHostname) {
  std::map<std::string, std::string> env;
  GetEnv getenv = [&](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  env["SLURM_NODEID"] = "3";
  EXPECT_EQ(exit_code_file_path("/logs/codes/node%n", 5, getenv), "/logs/codes/node3");
  env.clear();
  EXPECT_EQ(exit_code_file_path("/logs/codes/node%n", 5, getenv), "/logs/codes/node5");
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(exit_code_file_path("/x/%n/%n.code", -1, getenv), std::string("/x/") + host + "/" + host + ".code");
  EXPECT_EQ(exit_code_file_path("/x/plain", -1, getenv), "/x/plain");
}
