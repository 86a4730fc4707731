// The worker process layer on its own: environment and log files, exit codes and signals,
// stopping workers that ignore SIGTERM together with their children, program lookup, and
// waiting for a child through signals.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "launch/child_wait.h"
#include "launch/launch_harness.h"
#include "launch/worker_group.h"

using namespace cadre::launch;
using namespace launch_test;

namespace {

WorkerSpec spec(const TempDir& dir, int64_t rank, std::vector<std::pair<std::string, std::string>> env = {}) {
  WorkerSpec s;
  s.local_rank = s.global_rank = rank;
  s.env = std::move(env);
  s.stdout_path = dir.path + "/out" + std::to_string(rank);
  s.stderr_path = dir.path + "/err" + std::to_string(rank);
  return s;
}

WorkerGroup::State wait_state(WorkerGroup& group) {
  WorkerGroup::State state = WorkerGroup::State::Running;
  wait_until([&] { return (state = group.poll()) != WorkerGroup::State::Running; }, 30);
  return state;
}

}  // namespace

TEST(WorkerGroup, WorkersSeeTheirEnvironmentAndOutputReachesTheFiles) {
  TempDir dir;
  WorkerGroup group({"/bin/sh", "-c", "echo rank=$RANK; echo oops >&2"},
                    {spec(dir, 0, {{"RANK", "0"}}), spec(dir, 1, {{"RANK", "1"}})});
  EXPECT_EQ(wait_state(group), WorkerGroup::State::Succeeded);
  group.stop(SIGTERM, 1);
  EXPECT_EQ(read_file(dir.path + "/out1"), "rank=1\n");
  EXPECT_EQ(read_file(dir.path + "/err0"), "oops\n");
  EXPECT_EQ(group.stderr_tail(1), std::vector<std::string>{"oops"});
  EXPECT_EQ(group.first_failure(), nullptr);
}

TEST(WorkerGroup, ExitCodesAndSignalsAreReportedAsFailures) {
  TempDir dir;
  {
    WorkerGroup group({"/bin/sh", "-c", "[ $RANK = 1 ] && exit 4; sleep 30"},
                      {spec(dir, 0, {{"RANK", "0"}}), spec(dir, 1, {{"RANK", "1"}})});
    EXPECT_EQ(wait_state(group), WorkerGroup::State::Failed);
    ASSERT_NE(group.first_failure(), nullptr);
    EXPECT_EQ(group.first_failure()->global_rank, 1);
    EXPECT_EQ(group.first_failure()->describe(), "exit code 4");
    group.stop(SIGTERM, 5);
  }
  {
    WorkerGroup group({"/bin/sh", "-c", "kill -SEGV $$"}, {spec(dir, 0)});
    EXPECT_EQ(wait_state(group), WorkerGroup::State::Failed);
    ASSERT_NE(group.first_failure(), nullptr);
    EXPECT_EQ(group.first_failure()->signal, SIGSEGV);
    EXPECT_EQ(group.first_failure()->describe(), "signal 11 (SIGSEGV)");
  }
}

TEST(WorkerGroup, StopKillsWorkersIgnoringSigtermAndTheirChildren) {
  TempDir dir;
  std::string marker = "cadre-worker-group-test-" + std::to_string(::getpid());
  MarkerReaper reaper{marker};
  // The worker ignores SIGTERM and has a child that also does.
  std::string script = "trap '' TERM; /bin/sh -c \"trap '' TERM; while :; do sleep 0.1; done\" " + marker +
                       "-child & while :; do sleep 0.1; done";
  WorkerGroup group({"/bin/sh", "-c", script, marker}, {spec(dir, 0)});
  ASSERT_TRUE(wait_until([&] { return pids_with_marker(marker).size() >= 2; }, 30));
  group.stop(SIGTERM, 0.3);
  EXPECT_TRUE(wait_until([&] { return pids_with_marker(marker).empty(); }, 10));
  EXPECT_EQ(group.poll(), WorkerGroup::State::Failed);  // killed by SIGKILL after the grace period
  EXPECT_EQ(group.first_failure()->signal, SIGKILL);
}

// A worker gets exactly its standard streams, the job secret (descriptor 3) when there is one and
// its membership channel (descriptor 4) when asked for: no descriptor of the agent's leaks in,
// even one left open at 3 without close-on-exec.
TEST(WorkerGroup, WorkersInheritOnlyTheirOwnDescriptors) {
  const int saved = ::fcntl(3, F_DUPFD_CLOEXEC, 10);  // whatever this process holds at 3, if anything
  const int stray = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(stray, 0);
  ASSERT_EQ(::dup2(stray, 3), 3);  // open, inheritable
  if (stray != 3) ::close(stray);
  // Which of 0..9 are open (test -e stats the link: no descriptor of its own, unlike a glob).
  const std::string list = "for n in 0 1 2 3 4 5 6 7 8 9; do [ -e /proc/$$/fd/$n ] && printf '%s ' $n; done; :";
  auto descriptors = [&](bool channels) {
    TempDir logs;
    WorkerGroup group({"/bin/sh", "-c", list}, {spec(logs, 0)}, nullptr, -1, channels);
    EXPECT_EQ(wait_state(group), WorkerGroup::State::Succeeded);
    group.stop(SIGTERM, 1);
    return read_file(logs.path + "/out0");
  };
  EXPECT_EQ(descriptors(false), "0 1 2 \n");  // the log ends an unterminated last line
  EXPECT_EQ(descriptors(true), "0 1 2 4 \n");
  ::close(3);
  if (saved >= 0) {
    ::dup2(saved, 3);
    ::close(saved);
  }
}

TEST(WorkerGroup, ProgramLookup) {
  EXPECT_EQ(program_resolve("/bin/sh"), "/bin/sh");
  EXPECT_FALSE(program_resolve("sh").empty());
  EXPECT_THROW(program_resolve("no-such-program-for-cadre"), cadre::ConfigError);
  EXPECT_THROW(program_resolve("/etc/passwd"), cadre::ConfigError);  // not executable
}

// The agent's signal handlers do not restart system calls (its loops must see a signal at
// once), so a blocking waitpid returns EINTR when one arrives: the wait must go on rather
// than take the interruption for the child's end and lose its exit status.
TEST(ChildWait, SignalsDuringABlockingWaitDoNotLoseTheExitStatus) {
  struct sigaction quiet {}, old {};
  quiet.sa_handler = [](int) {};
  sigemptyset(&quiet.sa_mask);
  quiet.sa_flags = 0;  // no SA_RESTART, as the agent's handlers
  ASSERT_EQ(::sigaction(SIGUSR1, &quiet, &old), 0);
  pid_t child = ::fork();
  if (child == 0) {
    ::usleep(300 * 1000);
    ::_exit(7);
  }
  std::atomic<bool> waited{false};
  const pthread_t waiter = ::pthread_self();
  std::thread signaller([&] {
    while (!waited) {  // until the wait is over, so one of them surely lands inside it
      ::pthread_kill(waiter, SIGUSR1);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  int status = 0;
  pid_t r = cadre::launch::waitpid_retrying(child, &status, 0);
  waited = true;
  signaller.join();
  ::sigaction(SIGUSR1, &old, nullptr);
  if (r != child) ::waitpid(child, nullptr, 0);
  ASSERT_EQ(r, child) << std::strerror(errno);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}
