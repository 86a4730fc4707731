// `cadre run --rdzv-backend etcd` end to end against real etcd members started by the test:
// a worker crash restarts the group; the same run id runs again after a success, after giving
// up and after the whole job was SIGKILLed; a SIGKILLed agent that restarts rejoins; agents work
// over https; two agents train (`cadre train`, tiny config) while the leader of a 3-member etcd
// cluster is SIGKILLed; bad endpoints and credentials fail with clear messages.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "launch/launch_harness.h"
#include "launch/shell_worker.h"
#include "support/etcd_cluster.h"
#include "support/process.h"
#include "support/tiny_dataset.h"

using namespace launch_test;

namespace {

class EtcdRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    marker = "cadre-etcd-marker-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    reaper.marker = marker;
    script = dir.path + "/worker.sh";
    write_file(script, kWorkerScript);
  }
  void start_etcd(int members) { etcd = std::make_unique<cadre::test::EtcdCluster>(members); }

  // One agent ("node") over etcd, with short timeouts so the tests run in seconds.
  std::vector<std::string> agent_args(const std::string& run_id, const std::string& tag,
                                      const std::vector<std::string>& extra, const std::vector<std::string>& program) {
    std::vector<std::string> a = {CADRE_BIN, "run", "--nnodes", "2", "--rdzv-backend", "etcd",
                                  "--rdzv-endpoint", endpoints.empty() ? etcd->endpoints() : endpoints, "--rdzv-id", run_id,
                                  "--monitor-interval", "0.05", "--stop-timeout", "3", "--rdzv-conf",
                                  "last_call_timeout=1,heartbeat_timeout=2,join_timeout=30,store_timeout=10" + conf_extra,
                                  "--log-dir", dir.path + "/logs" + tag};
    a.insert(a.end(), extra.begin(), extra.end());
    a.push_back("--");
    a.insert(a.end(), program.begin(), program.end());
    return a;
  }
  std::vector<std::string> shell(const std::string& mode, const std::string& tag = "") {
    return {"/bin/sh", script, marker + tag, dir.path, mode};
  }
  std::unique_ptr<Proc> start_agent(const std::vector<std::string>& args, const std::string& name) {
    return std::make_unique<Proc>(args, dir.path + "/" + name + ".out");
  }
  // Starts two agents and returns both exit codes once they exit (within timeout_s).
  std::pair<int, int> run_pair(const std::string& run_id, const std::string& mode, const std::string& name,
                               const std::vector<std::string>& extra = {}) {
    auto a = start_agent(agent_args(run_id, name + "a", extra, shell(mode)), name + "a");
    auto b = start_agent(agent_args(run_id, name + "b", extra, shell(mode)), name + "b");
    bool exited = a->wait_exit(60) && b->wait_exit(60);
    EXPECT_TRUE(exited) << a->output() << b->output();
    outputs += a->output() + b->output();
    return {a->exit_code(), b->exit_code()};
  }
  std::set<int> ranks_started(int world, int restart = -1) { return worker_ranks_started(dir.path, world, restart); }
  size_t starts_with_world(int world) {
    size_t n = 0;
    for (const auto& s : worker_starts(dir.path)) n += s.world == world;
    return n;
  }

  TempDir dir;
  std::string marker, script, outputs;
  std::string endpoints;  // --rdzv-endpoint when not every member in order
  std::string conf_extra;  // appended to --rdzv-conf
  MarkerReaper reaper;
  std::unique_ptr<cadre::test::EtcdCluster> etcd;
};

TEST_F(EtcdRunTest, WorkerCrashRestartsTheGroupWhichFinishes) {
  start_etcd(1);
  auto [a, b] = run_pair("crash", "crash_once", "c", {"--max-restarts", "2"});
  EXPECT_EQ(a, 0) << outputs;
  EXPECT_EQ(b, 0) << outputs;
  EXPECT_EQ(ranks_started(2, 0), worker_all_ranks(2));
  EXPECT_EQ(ranks_started(2, 1), worker_all_ranks(2));
  EXPECT_EQ(ranks_started(2, 2), std::set<int>{});
  EXPECT_NE(outputs.find("rank 1 failed with exit code 3"), std::string::npos) << outputs;
  EXPECT_NE(outputs.find("rendezvous: using etcd " + etcd->endpoints()), std::string::npos) << outputs;
}

TEST_F(EtcdRunTest, TwoAgentsOverHttpsWithTheClusterCa) {
  cadre::test::EtcdClusterOptions o;
  o.tls = true;
  etcd = std::make_unique<cadre::test::EtcdCluster>(o);
  conf_extra = ",cacert=" + etcd->ca_file();
  auto [a, b] = run_pair("tls", "ok", "t");
  EXPECT_EQ(a, 0) << outputs;
  EXPECT_EQ(b, 0) << outputs;
  EXPECT_EQ(ranks_started(2, 0), worker_all_ranks(2));
  EXPECT_NE(outputs.find("rendezvous: using etcd https://"), std::string::npos) << outputs;
}

TEST_F(EtcdRunTest, SameRunIdRunsAgainAfterSuccessAndAfterGivingUp) {
  start_etcd(1);
  auto first = run_pair("again", "ok", "1");
  EXPECT_EQ(first, std::make_pair(0, 0)) << outputs;
  EXPECT_EQ(starts_with_world(2), 2u);
  // The same id right after a finished job: a fresh job, not "already finished".
  auto second = run_pair("again", "ok", "2");
  EXPECT_EQ(second, std::make_pair(0, 0)) << outputs;
  EXPECT_EQ(starts_with_world(2), 4u);
  EXPECT_NE(outputs.find("starting a fresh one (generation 1)"), std::string::npos) << outputs;
  EXPECT_EQ(outputs.find("already finished"), std::string::npos) << outputs;
  // A job that gives up does not poison the id either (no "restarts exceeded" carried over).
  write_file(dir.path + "/finish", "");
  auto failed = run_pair("again", "always", "3");
  EXPECT_EQ(failed, std::make_pair(1, 1)) << outputs;
  auto after_failure = run_pair("again", "ok", "4");
  EXPECT_EQ(after_failure, std::make_pair(0, 0)) << outputs;
  EXPECT_NE(outputs.find("gave up; starting a fresh one (generation 3)"), std::string::npos) << outputs;
}

TEST_F(EtcdRunTest, SigkilledAgentThatRestartsRejoinsAndTheJobFinishes) {
  start_etcd(1);
  auto a = start_agent(agent_args("rejoin", "a", {}, shell("wait", "a")), "a");
  auto b = start_agent(agent_args("rejoin", "b", {}, shell("wait", "b")), "b");
  ASSERT_TRUE(wait_until([&] { return ranks_started(2) == worker_all_ranks(2); }, 30)) << a->output() << b->output();
  b->signal(SIGKILL);
  ASSERT_TRUE(b->wait_exit(10));
  EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker + "b").empty(); }, 10));  // its worker died with it
  // The node comes back (same arguments) while its old session may still be alive.
  auto b2 = start_agent(agent_args("rejoin", "b2", {}, shell("wait", "b2")), "b2");
  ASSERT_TRUE(wait_until([&] { return starts_with_world(2) >= 4; }, 30)) << a->output() << b2->output();
  write_file(dir.path + "/finish", "");
  ASSERT_TRUE(a->wait_exit(30) && b2->wait_exit(30)) << a->output() << b2->output();
  EXPECT_EQ(a->exit_code(), 0) << a->output();
  EXPECT_EQ(b2->exit_code(), 0) << b2->output();
  EXPECT_EQ(ranks_started(2, 1), std::set<int>{});  // a membership change, not a failure restart
  std::string out = a->output() + b2->output();
  // The survivor saw the old session end, or the restarted agent ended the stale round first.
  EXPECT_TRUE(out.find("lost its session") != std::string::npos || out.find("stale round") != std::string::npos)
      << out;
}

TEST_F(EtcdRunTest, AJobKilledOutrightLeavesNoStateThatBlocksARerunWithTheSameId) {
  start_etcd(1);
  {
    auto a = start_agent(agent_args("killed", "a", {}, shell("wait", "a")), "a");
    auto b = start_agent(agent_args("killed", "b", {}, shell("wait", "b")), "b");
    ASSERT_TRUE(wait_until([&] { return ranks_started(2) == worker_all_ranks(2); }, 30)) << a->output() << b->output();
    a->signal(SIGKILL);
    b->signal(SIGKILL);
    ASSERT_TRUE(a->wait_exit(10) && b->wait_exit(10));
  }
  // Round 0 still looks "running" in etcd; its agents' sessions expire within the TTL (2 s).
  write_file(dir.path + "/finish", "");
  auto [a, b] = run_pair("killed", "wait", "r");
  EXPECT_EQ(a, 0) << outputs;
  EXPECT_EQ(b, 0) << outputs;
  EXPECT_EQ(starts_with_world(2), 4u);
  EXPECT_NE(outputs.find("stale round"), std::string::npos) << outputs;
}

TEST_F(EtcdRunTest, TwoAgentsTrainWhileAnEtcdMemberIsKilled) {
  start_etcd(3);
  cadre::test::TempDir data("etcd-train");
  std::string dataset = cadre::test::prepare_tiny_dataset(data.path(), 4, 20000);
  std::vector<std::string> train = {CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                    "--set", "data.dir=" + dataset, "--set", "run.dir=" + dir.path + "/run",
                                    "--set", "train.steps=40", "--set", "train.threads=1",
                                    "--set", "train.log_interval=1", "--set", "train.eval_interval=100"};
  // The leader goes first in the endpoint list: killing it exercises failover and an election.
  int leader = -1;
  ASSERT_TRUE(wait_until([&] { return (leader = etcd->leader()) >= 0; }, 10));
  endpoints = etcd->endpoint(leader);
  for (int i = 0; i < 3; ++i)
    if (i != leader) endpoints += "," + etcd->endpoint(i);
  auto a = start_agent(agent_args("train", "a", {}, train), "a");
  auto b = start_agent(agent_args("train", "b", {}, train), "b");
  auto steps_logged = [&] {
    std::ifstream in(dir.path + "/run/metrics.jsonl");
    int n = 0;
    for (std::string line; std::getline(in, line);) n += line.find("\"loss\"") != std::string::npos;
    return n;
  };
  // Once training is under way, SIGKILL the leader, which every agent talks to first.
  ASSERT_TRUE(wait_until([&] { return steps_logged() >= 2; }, 60)) << a->output() << b->output();
  etcd->kill(leader);
  int steps_at_kill = steps_logged();
  EXPECT_LT(steps_at_kill, 30) << "training ended too soon to matter";
  ASSERT_TRUE(a->wait_exit(120) && b->wait_exit(120)) << a->output() << b->output();
  EXPECT_EQ(a->exit_code(), 0) << a->output() << etcd->logs();
  EXPECT_EQ(b->exit_code(), 0) << b->output();
  // The run reached its last step in the first round: no restart was needed.
  std::ifstream in(dir.path + "/run/metrics.jsonl");
  int64_t last_step = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("step")) last_step = std::max<int64_t>(last_step, j["step"].get<int64_t>());
  }
  EXPECT_EQ(last_step, 40);
  EXPECT_EQ((a->output() + b->output()).find("round 1"), std::string::npos) << a->output() << b->output();
}

TEST_F(EtcdRunTest, BadEndpointsAndCredentialsFailWithClearMessages) {
  int dead1 = free_port(), dead2 = free_port();
  std::string dead = "127.0.0.1:" + std::to_string(dead1) + ",127.0.0.1:" + std::to_string(dead2);
  struct Case {
    std::vector<std::string> args;
    int code;
    std::vector<std::string> messages;
    std::vector<std::string> absent = {};
  };
  // (Endpoint syntax in detail: EtcdStore.BadEndpointSyntaxIsAConfigError.)
  std::vector<Case> cases = {
      {{"--rdzv-endpoint", dead, "--rdzv-conf", "store_timeout=1"},
       1,
       {"no endpoint answered within 1 s", "127.0.0.1:" + std::to_string(dead1) + " (",
        "127.0.0.1:" + std::to_string(dead2) + " (", "last error"}},
      {{"--rdzv-endpoint", "127.0.0.1:2379,,127.0.0.1:2380"}, 2, {"empty endpoint in the list"}},
      {{"--rdzv-endpoint", "127.0.0.1:1", "--rdzv-conf", "cacert=" + script}, 2, {"need https:// etcd endpoints"}},
      {{"--rdzv-endpoint", "https://127.0.0.1:1", "--rdzv-conf", "cacert=/no/such.pem"}, 2, {"no such file"}},
      {{"--rdzv-conf", "user=root"}, 2, {"needs both user and password"}},
      {{"--rdzv-conf", "heartbeat_timeout=1"}, 2, {"at least 2 s"}},
      {{"--standalone"}, 2, {"cannot be combined with --rdzv-backend etcd"}},
      // Two nodes and no secret given: it would be agreed on through etcd, in clear text over
      // http:// to another machine (loopback is allowed: nothing crosses a network).
      {{"--rdzv-endpoint", "10.255.255.1:2379", "--nnodes", "2"},
       2,
       {"job secret would be agreed on through etcd at http://10.255.255.1:2379 in clear text", "--job-secret-file"}},
      // Credentials over https:// are not warned about as plain http (the warning once came before
      // the endpoints' scheme was known).
      {{"--rdzv-endpoint", "https://127.0.0.1:" + std::to_string(dead1), "--rdzv-conf",
        "store_timeout=1,user=root,password=pw"},
       1,
       {"no endpoint answered within 1 s"},
       {"plain http"}},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> argv = {CADRE_BIN, "run", "--rdzv-backend", "etcd", "--log-dir",
                                     dir.path + "/bad-logs" + std::to_string(i)};
    argv.insert(argv.end(), cases[i].args.begin(), cases[i].args.end());
    argv.insert(argv.end(), {"--", "/bin/true"});
    Proc p(argv, dir.path + "/bad" + std::to_string(i) + ".out");
    ASSERT_TRUE(p.wait_exit(30));
    EXPECT_EQ(p.exit_code(), cases[i].code) << "case " << i << ": " << p.output();
    for (const auto& m : cases[i].messages)
      EXPECT_NE(p.output().find(m), std::string::npos) << "case " << i << " lacks '" << m << "': " << p.output();
    for (const auto& m : cases[i].absent)
      EXPECT_EQ(p.output().find(m), std::string::npos) << "case " << i << " says '" << m << "': " << p.output();
  }
}

}  // namespace

namespace {

// Sets environment variables for the agents this test starts (they inherit them), and takes
// them away again.
struct ScopedEnv {
  std::vector<std::string> names;
  ScopedEnv(std::initializer_list<std::pair<const char*, std::string>> vars) {
    for (const auto& [k, v] : vars) {
      ::setenv(k, v.c_str(), 1);
      names.push_back(k);
    }
  }
  ~ScopedEnv() {
    for (const auto& n : names) ::unsetenv(n.c_str());
  }
};

}  // namespace

// A password on the command line is visible in `ps` to every user of the machine: the agent
// overwrites it in its argv, says so, and warns that credentials over plain http can be read
// on the way (no etcd is needed for that; the agent retries the dead endpoint meanwhile).
TEST_F(EtcdRunTest, APasswordGivenOnTheCommandLineDisappearsFromPsAndHttpIsWarnedAbout) {
  const std::string password = "pw-" + marker;
  Proc agent({CADRE_BIN, "run", "--rdzv-backend", "etcd", "--rdzv-endpoint", "127.0.0.1:" + std::to_string(free_port()),
              "--rdzv-conf", "store_timeout=20,user=root,password=" + password, "--log-dir", dir.path + "/logs", "--",
              "/bin/true"},
             dir.path + "/agent.out");
  ASSERT_TRUE(wait_until([&] { return agent.output().find("plain http") != std::string::npos; }, 30)) << agent.output();
  const std::string cmdline = read_file("/proc/" + std::to_string(agent.pid()) + "/cmdline");
  EXPECT_EQ(cmdline.find(password), std::string::npos) << "the password is still in /proc/<pid>/cmdline";
  EXPECT_NE(cmdline.find("password=***"), std::string::npos) << cmdline;
  EXPECT_NE(agent.output().find("shows in `ps`"), std::string::npos) << agent.output();
}

// Credentials and the job secret reach the agent through its environment; the workers get
// neither variable, only the job secret, through an inherited descriptor.
TEST_F(EtcdRunTest, WorkersGetTheJobSecretAsADescriptorAndNoCredentials) {
  start_etcd(1);
  etcd->enable_auth("root", "rootpw");
  const std::string secret = "job-secret-" + marker;
  const std::string seen = dir.path + "/seen";
  std::unique_ptr<Proc> agent;
  {
    ScopedEnv env({{"CADRE_ETCD_USER", "root"}, {"CADRE_ETCD_PASSWORD", "rootpw"}, {"CADRE_JOB_SECRET", secret}});
    agent = std::make_unique<Proc>(
        std::vector<std::string>{CADRE_BIN, "run", "--rdzv-backend", "etcd", "--rdzv-endpoint", etcd->endpoints(),
                                 "--rdzv-id", "creds", "--log-dir", dir.path + "/logs", "--", "/bin/sh", "-c",
                                 "env > " + seen + ".env; cat /proc/self/fd/3 > " + seen + ".secret"},
        dir.path + "/agent.out");
  }
  ASSERT_TRUE(agent->wait_exit(60)) << agent->output();
  EXPECT_EQ(agent->exit_code(), 0) << agent->output();
  const std::string env = read_file(seen + ".env");
  EXPECT_EQ(env.find("CADRE_ETCD_PASSWORD"), std::string::npos) << env;
  EXPECT_EQ(env.find(secret), std::string::npos) << env;
  EXPECT_NE(env.find("CADRE_JOB_SECRET_FD=3"), std::string::npos) << env;
  EXPECT_EQ(read_file(seen + ".secret"), secret);
  EXPECT_EQ(agent->output().find("rootpw"), std::string::npos) << agent->output();
}
