// The agent's liveness port: accepted while its process lives (however many probes), refused once
// the process is gone, SIGKILL included; silence (connection requests dropped) is not "gone".
#include "rdzv/liveness_port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/clock.h"
#include "core/ipv4_address.h"

using namespace cadre::rdzv;

TEST(LivenessPort, AcceptedWhileItLivesRefusedOnceClosed) {
  auto port = std::make_unique<LivenessPort>("127.0.0.1");
  const uint16_t number = port->port();
  ASSERT_GT(number, 0);
  // More probes than the listen queue holds: the port accepts and closes, so none goes unanswered.
  for (int i = 0; i < 200; ++i) ASSERT_EQ(probe_liveness("127.0.0.1", number, 2.0), Liveness::kListening) << i;
  port.reset();
  EXPECT_EQ(probe_liveness("127.0.0.1", number, 2.0), Liveness::kRefused);
}

TEST(LivenessPort, AKilledProcesssPortRefusesAtOnce) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    LivenessPort port("127.0.0.1");
    const uint16_t number = port.port();
    if (write(fds[1], &number, sizeof number) != sizeof number) _exit(1);
    for (;;) pause();  // until killed
  }
  close(fds[1]);
  uint16_t number = 0;
  ASSERT_EQ(read(fds[0], &number, sizeof number), static_cast<ssize_t>(sizeof number));
  close(fds[0]);
  EXPECT_EQ(probe_liveness("127.0.0.1", number, 2.0), Liveness::kListening);
  kill(child, SIGKILL);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(probe_liveness("127.0.0.1", number, 5.0), Liveness::kRefused);
  EXPECT_LT(cadre::seconds_since(start), 1.0) << "a refusal comes in one round trip, not a timeout";
}

TEST(LivenessPort, SilenceIsNotGone) {
  // A listener that never accepts, its queue full: the kernel drops further connection requests
  // without an answer, as a cut link does.
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in sa = cadre::resolve_ipv4("127.0.0.1", 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(listener, 0), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  std::vector<int> queued;  // fills the queue: connections that complete until it is full
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
    queued.push_back(fd);
  }
  const Liveness l = probe_liveness("127.0.0.1", ntohs(sa.sin_port), 0.3);
  EXPECT_EQ(l, Liveness::kNoAnswer) << liveness_name(l);
  for (int fd : queued) close(fd);
  close(listener);
}
