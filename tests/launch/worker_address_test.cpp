// Workers learn the address peers reach their node at (CADRE_COMM_HOST, where their collectives
// bind) from the agent, instead of resolving the hostname, which on most machines maps to
// loopback. An address the user already exported wins. (Across real hops: tests/netfault.)
#include <gtest/gtest.h>

#include "launch/launch_harness.h"

using namespace launch_test;

namespace {

// Runs one agent whose single worker writes its CADRE_COMM_HOST to a file; returns that.
std::string worker_comm_host(const TempDir& dir, const std::vector<std::string>& agent_env) {
  std::string out = dir.path + "/comm_host";
  std::vector<std::string> argv = {"/usr/bin/env"};
  argv.insert(argv.end(), agent_env.begin(), agent_env.end());
  for (std::string a : {std::string(CADRE_BIN), std::string("run"), std::string("--log-dir"), dir.path + "/logs",
                        std::string("--"), std::string("/bin/sh"), std::string("-c"),
                        "printf %s \"$CADRE_COMM_HOST\" > " + out})
    argv.push_back(a);
  Proc agent(argv, dir.path + "/agent.out");
  EXPECT_TRUE(agent.wait_exit(60)) << agent.output();
  EXPECT_EQ(agent.exit_code(), 0) << agent.output();
  return read_file(out);
}

TEST(WorkerAddress, AgentGivesItsOwnAddress) {
  TempDir dir;
  // A single node hosts the store on loopback, so loopback is the address peers use.
  EXPECT_EQ(worker_comm_host(dir, {"-u", "CADRE_COMM_HOST"}), "127.0.0.1");
  EXPECT_EQ(worker_comm_host(dir, {"CADRE_COMM_HOST="}), "127.0.0.1");  // empty counts as unset
}

TEST(WorkerAddress, ExportedAddressWins) {
  TempDir dir;
  EXPECT_EQ(worker_comm_host(dir, {"CADRE_COMM_HOST=10.1.2.3"}), "10.1.2.3");
}

}  // namespace
