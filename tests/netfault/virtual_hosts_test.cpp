// The namespace hosts clean up after themselves however a test ends: on destruction (processes
// inside included), on SIGTERM, and, for a run that was SIGKILLed, at the next run's start.
// Needs root, like the fault scenarios.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launch/launch_harness.h"
#include "netfault/virtual_hosts.h"
#include "support/process.h"

using cadre::netfault::VirtualHosts;

namespace {

std::string namespaces() { return cadre::test::run_process({"ip", "netns", "list"}, {}, 30).output; }

class VirtualHostsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(VirtualHosts::have_privileges()) << "the netfault tests need root (network namespaces)";
  }
};

TEST_F(VirtualHostsTest, HostsReachEachOtherAndEverythingGoesAway) {
  std::string h0, h1;
  {
    VirtualHosts hosts(2);
    h0 = hosts.name(0);
    h1 = hosts.name(1);
    EXPECT_NE(namespaces().find(h1), std::string::npos);
    // Host 1 listens, host 0 connects over the bridge; each has its own hostname.
    cadre::test::TempDir dir("vh-connect");
    launch_test::Proc server(hosts.command(1, {"/usr/bin/python3", "-c",
                                               "import socket; s = socket.socket(); s.bind(('" + hosts.address(1) +
                                                   "', 7000)); s.listen(); s.settimeout(30); c, a = s.accept(); "
                                                   "print('from', a[0], flush=True)"}),
                             dir / "server.out");
    auto client = [&] {
      return cadre::test::run_process(
          hosts.command(0, {"/bin/bash", "-c", "hostname; echo hi > /dev/tcp/" + hosts.address(1) + "/7000"}), {}, 30);
    };
    cadre::test::RunResult r;
    ASSERT_TRUE(launch_test::wait_until([&] { return (r = client()).exit_code == 0; }, 30)) << r.output;
    EXPECT_EQ(r.output, "h0\n");
    ASSERT_TRUE(server.wait_exit(30));
    EXPECT_EQ(server.output(), "from " + hosts.address(0) + "\n");
    // A process left running inside a host is killed with it.
    launch_test::Proc sleeper(hosts.command(0, {"/bin/sleep", "600"}), "/dev/null");
    ASSERT_TRUE(launch_test::wait_until([&] { return !hosts.pids(0).empty(); }, 10));
  }
  EXPECT_EQ(namespaces().find(h0), std::string::npos) << namespaces();
  EXPECT_EQ(namespaces().find(h1), std::string::npos) << namespaces();
}

TEST_F(VirtualHostsTest, LeftoversOfASigkilledRunAreReaped) {
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);  // a pid nobody owns now, like a SIGKILLed test's
  std::string prefix = "cnf" + std::to_string(dead) + "-";
  auto up = cadre::test::run_process({"bash", CADRE_SOURCE_DIR "/tests/netfault/netns_hosts.sh", "up", prefix, "1"});
  ASSERT_EQ(up.exit_code, 0) << up.output;
  ASSERT_NE(namespaces().find(prefix + "h0"), std::string::npos);
  VirtualHosts hosts(1);
  EXPECT_EQ(namespaces().find(prefix), std::string::npos) << namespaces();
}

TEST_F(VirtualHostsTest, SigtermRemovesTheNamespaces) {
  cadre::test::TempDir dir("vh-sigterm");
  std::string ready = dir / "ready";
  pid_t child = ::fork();
  if (child == 0) {
    VirtualHosts hosts(1);
    cadre::test::write_text(ready, hosts.name(0));
    ::pause();  // until SIGTERM: the handler removes the namespaces and re-raises
    ::_exit(0);
  }
  ASSERT_TRUE(launch_test::wait_until([&] { return !launch_test::read_file(ready).empty(); }, 60));
  std::string name = launch_test::read_file(ready);
  ASSERT_NE(namespaces().find(name), std::string::npos);
  ::kill(child, SIGTERM);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM);
  EXPECT_EQ(namespaces().find(name), std::string::npos) << namespaces();
}

}  // namespace
