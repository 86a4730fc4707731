// `cadre run` end to end: several agents on this machine, each playing a node, running small
// shell workers. Covers the torchrun environment, restarts after a crash, giving up with a root
// cause, a SIGKILLed agent, a late agent (scale-up), SIGTERM without orphans, a rendezvous port in
// use, and bad flags.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "launch/launch_harness.h"
#include "launch/shell_worker.h"
#include "support/process.h"

using namespace launch_test;

namespace {

class RunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    marker = "cadre-launch-marker-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    reaper.marker = marker;
    script = dir.path + "/worker.sh";
    write_file(script, kWorkerScript);
    port = free_port();
    // Agents of one multi-node job share a job secret.
    secret_file = dir.path + "/secret";
    write_file(secret_file, "run-test-secret-" + marker + "\n");
    std::filesystem::permissions(secret_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }

  // Arguments of one agent ("node"), with short timeouts so the tests run in seconds.
  std::vector<std::string> agent_args(const std::string& nnodes, int nproc, const std::string& mode, int node_rank,
                                      const std::vector<std::string>& extra = {}, const std::string& tag = "") {
    std::vector<std::string> a = {CADRE_BIN, "run", "--nnodes", nnodes, "--nproc-per-node", std::to_string(nproc),
                                  "--rdzv-endpoint", "127.0.0.1:" + std::to_string(port), "--rdzv-id", "test",
                                  "--monitor-interval", "0.05", "--stop-timeout", "3",
                                  "--rdzv-conf",
                                  "last_call_timeout=1,heartbeat_timeout=2,join_timeout=30,store_timeout=15,exit_linger=5",
                                  "--log-dir", dir.path + "/logs" + tag, "--job-secret-file", secret_file};
    if (node_rank >= 0) {
      a.push_back("--node-rank");
      a.push_back(std::to_string(node_rank));
    }
    a.insert(a.end(), extra.begin(), extra.end());
    for (std::string s : {std::string("--"), std::string("/bin/sh"), script, marker + tag, dir.path, mode}) a.push_back(s);
    return a;
  }
  std::unique_ptr<Proc> start_agent(const std::vector<std::string>& args, const std::string& name) {
    return std::make_unique<Proc>(args, dir.path + "/" + name + ".out");
  }

  std::vector<Start> starts() { return worker_starts(dir.path); }
  std::set<int> ranks_started(int world, int restart = -1) { return worker_ranks_started(dir.path, world, restart); }
  std::set<int> all_ranks(int n) { return worker_all_ranks(n); }
  void finish() { write_file(dir.path + "/finish", ""); }

  // Two workers, each with a child; the agent gets `sig`: the workers must see it, the agent
  // must exit with 128+sig, and no process carrying the marker may remain.
  void check_signal_stop(int sig) {
    Proc agent({CADRE_BIN, "run", "--nproc-per-node", "2", "--log-dir", dir.path + "/logs", "--", "/bin/sh", script,
                marker, dir.path, "wait_child"},
               dir.path + "/agent.out");
    ASSERT_TRUE(wait_until([&] { return ranks_started(2) == all_ranks(2); }, 60)) << agent.output();
    ASSERT_TRUE(wait_until([&] { return pids_with_marker(marker + "-grandchild").size() == 2; }, 30));
    agent.signal(sig);
    ASSERT_TRUE(agent.wait_exit(30)) << agent.output();
    EXPECT_EQ(agent.exit_code(), 128 + sig) << agent.output();
    for (int r = 0; r < 2; ++r)
      EXPECT_EQ(read_file(dir.path + "/got_signal." + std::to_string(r)), "wait_child\n") << "rank " << r;
    EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker).empty(); }, 10));
    EXPECT_EQ(pids_with_marker(marker).size(), 0u);
  }

  TempDir dir;
  std::string marker, script, secret_file;
  MarkerReaper reaper;
  int port = 0;
};

TEST_F(RunTest, SingleNodeWorkersGetTorchrunEnvironmentAndPrefixedLogs) {
  Proc agent({CADRE_BIN, "run", "--nproc-per-node", "2", "--rdzv-id", "env-job", "--log-dir", dir.path + "/logs", "--",
              "/bin/sh", script, marker, dir.path, "ok"},
             dir.path + "/agent.out");
  ASSERT_TRUE(agent.wait_exit(60)) << agent.output();
  EXPECT_EQ(agent.exit_code(), 0) << agent.output();
  auto s = starts();
  ASSERT_EQ(s.size(), 2u);
  for (const auto& w : s) {
    EXPECT_EQ(w.env.at("RANK"), std::to_string(w.rank));
    EXPECT_EQ(w.env.at("LOCAL_RANK"), std::to_string(w.rank));
    EXPECT_EQ(w.env.at("WORLD_SIZE"), "2");
    EXPECT_EQ(w.env.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(w.env.at("GROUP_RANK"), "0");
    EXPECT_EQ(w.env.at("ROLE_RANK"), std::to_string(w.rank));
    EXPECT_EQ(w.env.at("ROLE_WORLD_SIZE"), "2");
    EXPECT_EQ(w.env.at("MASTER_ADDR"), "127.0.0.1");
    EXPECT_GT(std::stoi(w.env.at("MASTER_PORT")), 0);
    EXPECT_EQ(w.env.at("TORCHELASTIC_RESTART_COUNT"), "0");
    EXPECT_EQ(w.env.at("TORCHELASTIC_MAX_RESTARTS"), "0");
    EXPECT_EQ(w.env.at("TORCHELASTIC_RUN_ID"), "env-job");
    EXPECT_EQ(w.env.at("TORCHELASTIC_ERROR_FILE"), dir.path + "/logs/round_0/rank_" + std::to_string(w.rank) + "/error.json");
  }
  EXPECT_EQ(s[0].env.at("MASTER_PORT"), s[1].env.at("MASTER_PORT"));
  std::string out = agent.output();
  EXPECT_NE(out.find("[rank 0]: out from rank 0"), std::string::npos) << out;
  EXPECT_NE(out.find("[rank 1]: err from rank 1"), std::string::npos) << out;
  EXPECT_EQ(read_file(dir.path + "/logs/round_0/rank_1/stdout.log"), "out from rank 1\n");
  EXPECT_EQ(read_file(dir.path + "/logs/round_0/rank_0/stderr.log"), "err from rank 0\n");
}

TEST_F(RunTest, WorkerCrashingOnceRestartsTheGroupWhichFinishes) {
  auto a0 = start_agent(agent_args("2", 1, "crash_once", 0, {"--max-restarts", "2"}), "a0");
  auto a1 = start_agent(agent_args("2", 1, "crash_once", 1, {"--max-restarts", "2"}), "a1");
  ASSERT_TRUE(a0->wait_exit(60) && a1->wait_exit(60)) << a0->output() << a1->output();
  EXPECT_EQ(a0->exit_code(), 0) << a0->output();
  EXPECT_EQ(a1->exit_code(), 0) << a1->output();
  // Both ranks ran a second time and saw restart count 1.
  EXPECT_EQ(ranks_started(2, 0), all_ranks(2));
  EXPECT_EQ(ranks_started(2, 1), all_ranks(2));
  EXPECT_EQ(ranks_started(2, 2), std::set<int>{});
  EXPECT_NE((a0->output() + a1->output()).find("rank 1 failed with exit code 3"), std::string::npos);
  // Each node keeps its group rank in the restarted round.
  for (Proc* a : {a0.get(), a1.get()}) {
    std::string out = a->output();
    auto rank_in = [&](const std::string& round) {
      auto at = out.find(round + ": group rank ");
      return at == std::string::npos ? std::string("?") : out.substr(at + round.size() + 13, 1);
    };
    EXPECT_NE(rank_in("round 0"), "?") << out;
    EXPECT_EQ(rank_in("round 0"), rank_in("round 1")) << out;
  }
}

TEST_F(RunTest, StaticBackendRanksFollowNodeRankAndRestarts) {
  // Node rank 1 starts first and waits for node rank 0, which hosts the store.
  auto a1 = start_agent(agent_args("2", 2, "crash_once", 1, {"--rdzv-backend", "static", "--max-restarts", "1"}), "a1");
  auto a0 = start_agent(agent_args("2", 2, "crash_once", 0, {"--rdzv-backend", "static", "--max-restarts", "1"}), "a0");
  ASSERT_TRUE(a0->wait_exit(60) && a1->wait_exit(60)) << a0->output() << a1->output();
  EXPECT_EQ(a0->exit_code(), 0) << a0->output();
  EXPECT_EQ(a1->exit_code(), 0) << a1->output();
  EXPECT_EQ(ranks_started(4, 1), all_ranks(4));
  for (const auto& s : starts()) EXPECT_EQ(s.env.at("GROUP_RANK"), std::to_string(s.rank / 2)) << "rank " << s.rank;
  EXPECT_NE(a1->output().find("round 1: group rank 1 of 2 nodes, ranks 2..3 of 4"), std::string::npos) << a1->output();
}

TEST_F(RunTest, AlwaysCrashingWorkerGivesUpAfterMaxRestartsWithRootCause) {
  auto a0 = start_agent(agent_args("2", 1, "always", 0, {"--max-restarts", "2"}, "0"), "a0");
  auto a1 = start_agent(agent_args("2", 1, "always", 1, {"--max-restarts", "2"}, "1"), "a1");
  ASSERT_TRUE(a0->wait_exit(60) && a1->wait_exit(60)) << a0->output() << a1->output();
  EXPECT_EQ(a0->exit_code(), 1) << a0->output();
  EXPECT_EQ(a1->exit_code(), 1) << a1->output();
  // Three attempts (restart counts 0, 1, 2), then no more.
  for (int r = 0; r <= 2; ++r) EXPECT_EQ(ranks_started(2, r), all_ranks(2)) << "restart " << r;
  EXPECT_EQ(ranks_started(2, 3), std::set<int>{});
  for (std::string tag : {"0", "1"}) {
    std::string text = read_file(dir.path + "/logs" + tag + "/error.json");
    ASSERT_FALSE(text.empty()) << "no error file for agent " << tag;
    auto j = nlohmann::json::parse(text);
    EXPECT_EQ(j["root_cause"]["rank"], 0);
    EXPECT_EQ(j["root_cause"]["exit_code"], 7);
    EXPECT_EQ(j["root_cause"]["restart_count"], 2);
    EXPECT_FALSE(j["root_cause"]["time"].get<std::string>().empty());
    auto tail = j["root_cause"]["stderr_tail"].get<std::vector<std::string>>();
    ASSERT_FALSE(tail.empty());
    EXPECT_EQ(tail.back(), "fatal: rank 0 cannot continue");
    EXPECT_EQ(j["root_cause"]["worker_error"]["message"], "rank 0 raised ValueError");  // TORCHELASTIC_ERROR_FILE
  }
  EXPECT_NE(a1->output().find("fatal: rank 0 cannot continue"), std::string::npos) << a1->output();
  EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker).empty(); }, 10));
}

TEST_F(RunTest, SigkilledAgentIsNoticedAndTheOthersReform) {
  std::vector<std::unique_ptr<Proc>> agents;
  for (int i = 0; i < 3; ++i)
    agents.push_back(start_agent(agent_args("2:3", 1, "wait", i, {}, std::to_string(i)), "a" + std::to_string(i)));
  ASSERT_TRUE(wait_until([&] { return ranks_started(3) == all_ranks(3); }, 60)) << agents[0]->output();
  agents[2]->signal(SIGKILL);  // node 2 (not the store host) dies
  ASSERT_TRUE(agents[2]->wait_exit(10));
  // Its worker dies with it (PR_SET_PDEATHSIG) ...
  EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker + "2").empty(); }, 10));
  // ... and the two survivors re-form a group of 2, without counting a failure restart.
  ASSERT_TRUE(wait_until([&] { return ranks_started(2, 0) == all_ranks(2); }, 60))
      << agents[0]->output() << agents[1]->output();
  finish();
  ASSERT_TRUE(agents[0]->wait_exit(60) && agents[1]->wait_exit(60));
  EXPECT_EQ(agents[0]->exit_code(), 0) << agents[0]->output();
  EXPECT_EQ(agents[1]->exit_code(), 0) << agents[1]->output();
  // Seen at once: its session key in the store vanished with its connection (no heartbeat wait).
  EXPECT_NE((agents[0]->output() + agents[1]->output()).find("is gone (its connection to the rendezvous store"),
            std::string::npos)
      << agents[0]->output() << agents[1]->output();
}

TEST_F(RunTest, NodeLossBelowMinimumFailsAfterJoinTimeoutWithClearMessage) {
  auto short_join = [](std::vector<std::string> args) {
    for (auto& a : args)
      if (a.find("join_timeout=30") != std::string::npos) a.replace(a.find("join_timeout=30"), 15, "join_timeout=3");
    return args;
  };
  auto a0 = start_agent(short_join(agent_args("2", 1, "wait", 0, {}, "0")), "a0");
  auto a1 = start_agent(short_join(agent_args("2", 1, "wait", 1, {}, "1")), "a1");
  ASSERT_TRUE(wait_until([&] { return ranks_started(2) == all_ranks(2); }, 60)) << a0->output();
  a1->signal(SIGKILL);
  ASSERT_TRUE(a0->wait_exit(60)) << a0->output();
  EXPECT_EQ(a0->exit_code(), 1) << a0->output();
  EXPECT_NE(a0->output().find("only 1 of the minimum 2 nodes joined within 3 s"), std::string::npos) << a0->output();
  EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker).empty(); }, 10));
}

TEST_F(RunTest, LateAgentTriggersScaleUp) {
  auto a0 = start_agent(agent_args("1:2", 1, "wait", 0, {}, "0"), "a0");
  ASSERT_TRUE(wait_until([&] { return ranks_started(1) == all_ranks(1); }, 60)) << a0->output();
  auto a1 = start_agent(agent_args("1:2", 1, "wait", 1, {}, "1"), "a1");
  ASSERT_TRUE(wait_until([&] { return ranks_started(2) == all_ranks(2); }, 60)) << a0->output() << a1->output();
  finish();
  ASSERT_TRUE(a0->wait_exit(60) && a1->wait_exit(60));
  EXPECT_EQ(a0->exit_code(), 0) << a0->output();
  EXPECT_EQ(a1->exit_code(), 0) << a1->output();
  EXPECT_EQ(ranks_started(2, 0), all_ranks(2));  // a membership change is not a failure restart
  EXPECT_NE(a0->output().find("scale-up"), std::string::npos) << a0->output();
}

// SIGTERM / SIGINT to an agent: forwarded to the workers (they see it), then everything is gone.
TEST_F(RunTest, SigtermIsForwardedAndLeavesNoOrphans) { check_signal_stop(SIGTERM); }
TEST_F(RunTest, SigintIsForwardedAndLeavesNoOrphans) { check_signal_stop(SIGINT); }

// SIGHUP (the terminal or session went away) is handled like SIGTERM: the workers get SIGTERM
// (which a trainer answers with a checkpoint), the agent exits 129, and nothing is left. Its
// default action would kill the agent at once and leave the workers' children behind.
TEST_F(RunTest, SighupStopsTheWorkersLikeSigtermAndLeavesNoOrphans) { check_signal_stop(SIGHUP); }

// A SIGKILLed agent cannot stop anything itself: its guard process kills the workers' whole
// process groups, so the workers' own children die too (PR_SET_PDEATHSIG reaches only the
// workers), and the guard then exits.
TEST_F(RunTest, SigkilledAgentLeavesNoWorkerOrGrandchildAlive) {
  Proc agent({CADRE_BIN, "run", "--nproc-per-node", "2", "--log-dir", dir.path + "/logs", "--", "/bin/sh", script,
              marker, dir.path, "wait_child"},
             dir.path + "/agent.out");
  ASSERT_TRUE(wait_until([&] { return ranks_started(2) == all_ranks(2); }, 60)) << agent.output();
  ASSERT_TRUE(wait_until([&] { return pids_with_marker(marker + "-grandchild").size() == 2; }, 30));
  agent.signal(SIGKILL);
  ASSERT_TRUE(agent.wait_exit(10));
  EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker).empty(); }, 10))
      << pids_with_marker(marker).size() << " processes survived, e.g. pid " << pids_with_marker(marker).front();
}

// A worker that writes invalid UTF-8 to stderr and an error file cut inside a UTF-8 sequence
// (the agent reads at most 64 KiB of it) still gives a root cause and an error file; the agent
// used to throw while building the JSON and exit without one.
TEST_F(RunTest, InvalidUtf8AndACutErrorFileStillGiveTheRootCause) {
  const std::string bad = dir.path + "/bad.sh";
  write_file(bad, "printf 'bad bytes: \\377\\376 end\\n' >&2\n"
                  "{ printf '{\"message\": \"'; yes 'é' | tr -d '\\n' | head -c 70000; } > \"$TORCHELASTIC_ERROR_FILE\"\n"
                  "exit 5\n");
  Proc agent({CADRE_BIN, "run", "--log-dir", dir.path + "/logs", "--exit-code-file", dir.path + "/exit-code", "--",
              "/bin/sh", bad, marker},
             dir.path + "/agent.out");
  ASSERT_TRUE(agent.wait_exit(60)) << agent.output();
  EXPECT_EQ(agent.exit_code(), 1) << agent.output();  // exit 5 is a failure, not bad input
  EXPECT_EQ(read_file(dir.path + "/exit-code"), "1\n");
  const std::string text = read_file(dir.path + "/logs/error.json");
  ASSERT_FALSE(text.empty()) << agent.output();
  auto j = nlohmann::json::parse(text);
  EXPECT_EQ(j["root_cause"]["exit_code"], 5) << text.substr(0, 500);
  auto tail = j["root_cause"]["stderr_tail"].get<std::vector<std::string>>();
  ASSERT_FALSE(tail.empty());
  EXPECT_NE(tail.back().find("bad bytes: "), std::string::npos) << tail.back();
  EXPECT_TRUE(j["root_cause"]["worker_error"].is_string());
}

// Without --log-dir, a `cadre train` worker's logs go under its run directory. The worker fails
// on bad input (exit 2): the agent gives up with 2 too, after its restarts, and writes it to
// --exit-code-file ("%n": the node rank outside Slurm), for a batch script not to retry it.
TEST_F(RunTest, CadreTrainLogsGoUnderItsRunDirectory) {
  const std::string run = dir.path + "/run";
  Proc agent({CADRE_BIN, "run", "--max-restarts", "1", "--node-rank", "0", "--exit-code-file",
              dir.path + "/codes/node%n", "--", CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
              "--set", "run.dir=" + run, "--set", "data.dir=" + dir.path + "/no-such-data"},
             dir.path + "/agent.out");
  ASSERT_TRUE(agent.wait_exit(120)) << agent.output();
  EXPECT_EQ(agent.exit_code(), 2) << agent.output();
  EXPECT_NE(agent.output().find("exiting with 2 as the failed worker did"), std::string::npos) << agent.output();
  EXPECT_TRUE(std::filesystem::exists(run + "/logs/round_1")) << "the failure was not restarted once";
  EXPECT_EQ(read_file(dir.path + "/codes/node0"), "2\n");
  EXPECT_NE(agent.output().find("logs in " + run + "/logs"), std::string::npos) << agent.output();
  EXPECT_NE(read_file(run + "/logs/round_0/rank_0/stderr.log").find("no-such-data"), std::string::npos);
  EXPECT_TRUE(std::filesystem::is_regular_file(run + "/logs/error.json"));
}

// Without --log-dir and a run directory, logs go to a temporary cadre-run-* directory: removed
// when the job succeeds, kept when it fails (it has error.json), and only the newest 10 kept
// stay; a directory whose agent still runs is never removed.
TEST_F(RunTest, TemporaryLogDirectoriesAreRemovedAfterSuccessAndRotatedAfterFailure) {
  const std::string tmp = dir.path + "/tmp";
  std::filesystem::create_directories(tmp);
  auto logs = [&] {
    std::set<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(tmp)) out.insert(e.path().filename().string());
    return out;
  };
  auto ok = cadre::test::run_process({CADRE_BIN, "run", "--", "/bin/sh", "-c", "echo fine"}, {"TMPDIR=" + tmp}, 60);
  ASSERT_EQ(ok.exit_code, 0) << ok.output;
  EXPECT_TRUE(logs().empty()) << *logs().begin();

  pid_t gone = ::fork();  // a pid that no process has any more
  if (gone == 0) ::_exit(0);
  ::waitpid(gone, nullptr, 0);
  const auto now = std::filesystem::file_time_type::clock::now();
  for (int i = 0; i < 12; ++i) {  // left by failed runs, oldest first
    const std::string d = tmp + "/cadre-run-old" + std::to_string(100 + i);
    std::filesystem::create_directories(d);
    write_file(d + "/agent.pid", std::to_string(i == 0 ? ::getpid() : gone) + "\n");  // the oldest is "running"
    std::filesystem::last_write_time(d, now - std::chrono::hours(100 - i));
  }
  auto failed = cadre::test::run_process({CADRE_BIN, "run", "--", "/bin/sh", "-c", "exit 3"}, {"TMPDIR=" + tmp}, 60);
  ASSERT_EQ(failed.exit_code, 1) << failed.output;
  auto left = logs();
  EXPECT_EQ(left.size(), 11u);  // the live agent's, 9 newest others, and the new one
  EXPECT_TRUE(left.count("cadre-run-old100"));
  EXPECT_FALSE(left.count("cadre-run-old101"));
  EXPECT_FALSE(left.count("cadre-run-old102"));
  EXPECT_TRUE(left.count("cadre-run-old103"));
  EXPECT_TRUE(left.count("cadre-run-old111"));
  size_t with_error = 0;
  for (const auto& name : left) with_error += std::filesystem::exists(tmp + "/" + name + "/error.json");
  EXPECT_EQ(with_error, 1u);
}

TEST_F(RunTest, CadreAsTheProgramResolvesToThisBinary) {
  Proc agent({CADRE_BIN, "run", "--log-dir", dir.path + "/logs", "--", "cadre", "run", "--help"}, dir.path + "/agent.out");
  ASSERT_TRUE(agent.wait_exit(60)) << agent.output();
  EXPECT_EQ(agent.exit_code(), 0) << agent.output();
  EXPECT_NE(agent.output().find("[rank 0]: usage: cadre run"), std::string::npos) << agent.output();
}

TEST_F(RunTest, RendezvousPortHeldByAnotherProgram) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);  // accepts connections (backlog) but never answers
  {  // static backend, node 0 must host the store there
    Proc agent(agent_args("2", 1, "ok", 0, {"--rdzv-backend", "static"}), dir.path + "/static.out");
    ASSERT_TRUE(agent.wait_exit(60));
    EXPECT_EQ(agent.exit_code(), 1);
    EXPECT_NE(agent.output().find("cannot host the rendezvous store on 127.0.0.1:" + std::to_string(port)),
              std::string::npos) << agent.output();
  }
  {  // c10d backend: it finds the port taken, tries it as a client, and gets no answer
    auto args = agent_args("2", 1, "ok", -1);
    for (auto& a : args)
      if (a.find("store_timeout=") != std::string::npos) a = "join_timeout=30,store_timeout=2";
    Proc agent(args, dir.path + "/c10d.out");
    ASSERT_TRUE(agent.wait_exit(60));
    EXPECT_EQ(agent.exit_code(), 1);
    EXPECT_NE(agent.output().find("127.0.0.1:" + std::to_string(port) + " did not answer as a rendezvous store"),
              std::string::npos) << agent.output();
  }
  ::close(fd);
  EXPECT_TRUE(starts().empty());
}

TEST_F(RunTest, BadFlagsExitWithCode2AndSayWhy) {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--nproc-per-node", "2"}, "no program given"},
      {{"--nnodes", "3:2", "--", "/bin/true"}, "MIN must not exceed MAX"},
      {{"--nnodes", "two", "--", "/bin/true"}, "--nnodes must be a positive integer"},
      {{"--nproc-per-node", "0", "--", "/bin/true"}, "--nproc-per-node must be at least 1"},
      {{"--rdzv-backend", "zookeeper", "--", "/bin/true"}, "--rdzv-backend must be c10d, static or etcd"},
      {{"--rdzv-backend", "static", "--nnodes", "2", "--", "/bin/true"}, "needs --node-rank"},
      {{"--rdzv-backend", "static", "--nnodes", "1:2", "--node-rank", "0", "--", "/bin/true"}, "needs a fixed --nnodes"},
      {{"--node-rank", "2", "--nnodes", "2", "--", "/bin/true"}, "--node-rank 2 must be below"},
      {{"--rdzv-conf", "join_timeout=abc", "--", "/bin/true"}, "join_timeout must be a positive number"},
      {{"--rdzv-conf", "speed=3", "--", "/bin/true"}, "unknown key 'speed'"},
      {{"--rdzv-endpoint", "127.0.0.1:99999", "--nnodes", "2", "--", "/bin/true"}, "port must be a number"},
      {{"--max-restarts", "-1", "--", "/bin/true"}, "--max-restarts must be >= 0"},
      {{"--no-such-flag", "--", "/bin/true"}, "unknown flag '--no-such-flag'"},
      {{"--", "no-such-program-" + marker}, "not found in PATH"},
      {{"--stall-action", "kill", "--", "/bin/true"}, "--stall-action must be dump or restart, got 'kill'"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::vector<std::string> argv = {CADRE_BIN, "run"};
    argv.insert(argv.end(), cases[i].args.begin(), cases[i].args.end());
    Proc p(argv, dir.path + "/bad" + std::to_string(i) + ".out");
    ASSERT_TRUE(p.wait_exit(30));
    EXPECT_EQ(p.exit_code(), 2) << "case " << i << ": " << p.output();
    EXPECT_NE(p.output().find(cases[i].message), std::string::npos) << "case " << i << ": " << p.output();
  }
  // The batch script's copy of the code: bad input found by the agent itself is 2 there too.
  Proc p({CADRE_BIN, "run", "--exit-code-file", dir.path + "/bad-code", "--nproc-per-node", "0", "--", "/bin/true"},
         dir.path + "/bad-code.out");
  ASSERT_TRUE(p.wait_exit(30));
  EXPECT_EQ(p.exit_code(), 2) << p.output();
  EXPECT_EQ(read_file(dir.path + "/bad-code"), "2\n") << p.output();
}

// A metrics port another process holds is bad input like any flag: exit 2 naming it (it once
// ended in std::terminate, the observer's thread already running when the bind failed).
TEST_F(RunTest, ATakenMetricsPortExits2NamingTheFlag) {
  const int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(holder, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(holder, 1), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::string port = std::to_string(ntohs(addr.sin_port));
  Proc p({CADRE_BIN, "run", "--metrics-addr", "127.0.0.1", "--metrics-port", port, "--", "/bin/true"},
         dir.path + "/taken-port.out");
  ASSERT_TRUE(p.wait_exit(30));
  ::close(holder);
  EXPECT_EQ(p.exit_code(), 2) << p.output();
  EXPECT_NE(p.output().find("--metrics-port: cannot listen on 127.0.0.1:" + port), std::string::npos) << p.output();
}

}  // namespace
