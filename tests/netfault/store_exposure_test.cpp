// What a job exposes to the network. Single node: `cadre run --standalone` trains the tiny model
// with 2 workers inside a network namespace that also has a routable address (10.77.0.10):
// every TCP listener of the job (the agent's rendezvous store, rank 0's store on MASTER_PORT,
// Gloo's pairs) must be on loopback, and none may answer on 10.77.0.10. c10d's TCPStore
// listened on every interface here, for anyone who could reach the machine.
#include <gtest/gtest.h>

#include <signal.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "launch/launch_harness.h"
#include "netfault/virtual_hosts.h"
#include "support/process.h"
#include "support/tiny_dataset.h"

using cadre::netfault::VirtualHosts;

namespace {

struct Listener {
  std::string address;  // "127.0.0.1", "0.0.0.0", "::", "::1", ...
  int port = 0;
};

// TCP sockets in LISTEN state in the network namespace of `pid` (/proc/<pid>/net/tcp{,6}).
std::vector<Listener> tcp_listeners(pid_t pid) {
  std::vector<Listener> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::istringstream lines(launch_test::read_file("/proc/" + std::to_string(pid) + "/net/" + table));
    std::string line;
    std::getline(lines, line);  // header
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      if (state != "0A") continue;  // LISTEN
      const std::string hex = local.substr(0, local.find(':'));
      Listener l;
      l.port = std::stoi(local.substr(local.find(':') + 1), nullptr, 16);
      if (hex.size() == 8) {  // IPv4, little-endian
        const uint32_t a = static_cast<uint32_t>(std::stoul(hex, nullptr, 16));
        l.address = std::to_string(a & 0xff) + "." + std::to_string((a >> 8) & 0xff) + "." +
                    std::to_string((a >> 16) & 0xff) + "." + std::to_string(a >> 24);
      } else {
        l.address = hex == std::string(32, '0') ? "::" : hex == "00000000000000000000000001000000" ? "::1" : hex;
      }
      out.push_back(l);
    }
  }
  return out;
}

}  // namespace

TEST(StoreExposure, AStandaloneRunListensOnLoopbackOnly) {
  ASSERT_TRUE(VirtualHosts::have_privileges()) << "network namespaces need root";
  cadre::test::TempDir dir("exposure");
  const std::string data = cadre::test::prepare_tiny_dataset(dir.path(), 2, 20000);
  const std::string run = dir / "run";
  VirtualHosts hosts(1);
  std::vector<std::string> argv = {CADRE_BIN, "run", "--standalone", "--nproc-per-node", "2", "--log-dir", dir / "logs",
                                   "--", CADRE_BIN, "train", "--config", CADRE_SOURCE_DIR "/configs/tiny.yaml",
                                   "--set", "data.dir=" + data, "--set", "run.dir=" + run, "--set", "train.steps=100000",
                                   "--set", "train.threads=1", "--set", "train.eval_interval=0",
                                   "--set", "checkpoint.interval=0"};
  launch_test::Proc agent(hosts.command(0, argv, {"OMP_NUM_THREADS=1"}), dir / "agent.out");
  // Training has started: the workers' store and Gloo's pairs exist along with the agent's.
  ASSERT_TRUE(launch_test::wait_until(
      [&] { return launch_test::read_file(run + "/metrics.jsonl").find('\n') != std::string::npos; }, 120))
      << agent.output();

  auto listeners = tcp_listeners(agent.pid());
  std::set<int> ports;
  for (const auto& l : listeners) {
    std::printf("listening: %s:%d\n", l.address.c_str(), l.port);
    ports.insert(l.port);
    EXPECT_TRUE(l.address.rfind("127.", 0) == 0 || l.address == "::1")
        << "port " << l.port << " listens on " << l.address << ", reachable from the network";
  }
  EXPECT_GE(ports.size(), 2u) << "expected at least the rendezvous store and the workers' store";
  for (int port : ports) {
    auto r = cadre::test::run_process(
        hosts.command(0, {"/bin/bash", "-c", "exec 3<>/dev/tcp/" + hosts.address(0) + "/" + std::to_string(port)}), {},
        30);
    EXPECT_NE(r.exit_code, 0) << "port " << port << " answered on " << hosts.address(0);
  }
  agent.signal(SIGTERM);
  EXPECT_TRUE(agent.wait_exit(60)) << agent.output();
}

// A two-node job (each node a network namespace host with one routable address and loopback):
// every listener of either node while it trains — the agents' rendezvous store, rank 0's store
// — is on that node's job address (where its peers reach it) or on loopback, never on every
// interface (0.0.0.0 or ::). Gloo's data plane (no authentication of its own) binds its pair
// listeners to CADRE_COMM_HOST, the same job address the agent hands its workers.
TEST(StoreExposure, AMultiNodeJobListensOnEachNodesAddressOnly) {
  ASSERT_TRUE(VirtualHosts::have_privileges()) << "network namespaces need root";
  cadre::test::TempDir dir("exposure2");
  const std::string data = cadre::test::prepare_tiny_dataset(dir.path(), 2, 20000);
  const std::string run = dir / "run";
  VirtualHosts hosts(2);
  std::vector<std::unique_ptr<launch_test::Proc>> agents;
  for (int h = 0; h < 2; ++h) {
    std::vector<std::string> argv = {CADRE_BIN, "run", "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend",
                                     "c10d", "--rdzv-endpoint", hosts.address(0) + ":29400", "--log-dir",
                                     dir / ("logs" + std::to_string(h)), "--", CADRE_BIN, "train", "--config",
                                     CADRE_SOURCE_DIR "/configs/tiny.yaml", "--set", "data.dir=" + data, "--set",
                                     "run.dir=" + run, "--set", "train.steps=100000", "--set", "train.threads=1",
                                     "--set", "train.eval_interval=0", "--set", "checkpoint.interval=0"};
    agents.push_back(std::make_unique<launch_test::Proc>(
        hosts.command(h, argv, {"OMP_NUM_THREADS=1", "CADRE_JOB_SECRET=exposure-job-secret-0123456789"}),
        dir / ("agent" + std::to_string(h) + ".out")));
  }
  ASSERT_TRUE(launch_test::wait_until(
      [&] { return launch_test::read_file(run + "/metrics.jsonl").find('\n') != std::string::npos; }, 120))
      << agents[0]->output() << agents[1]->output();
  for (int h = 0; h < 2; ++h) {
    size_t on_job_address = 0;
    for (const auto& l : tcp_listeners(agents[h]->pid())) {
      std::printf("host %d listening: %s:%d\n", h, l.address.c_str(), l.port);
      const bool loopback = l.address.rfind("127.", 0) == 0 || l.address == "::1";
      on_job_address += l.address == hosts.address(h);
      EXPECT_TRUE(loopback || l.address == hosts.address(h))
          << "host " << h << ": port " << l.port << " listens on " << l.address << ", not on " << hosts.address(h);
    }
    // Node 0 hosts the rendezvous store its peers reach (Gloo's pair listeners close once their
    // pairs are connected, so node 1 may have none left).
    if (h == 0) {
      EXPECT_GE(on_job_address, 1u);
    }
  }
  for (auto& a : agents) a->signal(SIGTERM);
  for (auto& a : agents) EXPECT_TRUE(a->wait_exit(60)) << a->output();
}
