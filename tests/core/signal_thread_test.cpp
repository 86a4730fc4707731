// route_signals_to_one_thread: a process-directed signal's handler runs on the signal thread,
// never on the thread that computes, and oneDNN's JIT GEMM keeps running right under a stream of
// signals. Each case runs in a forked child, whose signal mask and handlers it changes.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "core/signal_thread.h"
#include "models/dnnl_linear.h"

namespace {

std::atomic<long> g_main_tid{0};
std::atomic<int> g_on_main{0}, g_elsewhere{0};

void count_where_handled(int) {
  if (syscall(SYS_gettid) == g_main_tid.load())
    g_on_main.fetch_add(1);
  else
    g_elsewhere.fetch_add(1);
}

void install_counting_handler() {
  g_main_tid = syscall(SYS_gettid);
  struct sigaction sa {};
  sa.sa_handler = count_where_handled;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
}

// Runs `body` in a forked child; its exit status (the child exits with body's return value).
int in_child(const std::function<int()>& body) {
  const pid_t pid = fork();
  if (pid == 0) _exit(body());
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

// Sends SIGUSR2 to the whole process every 20 µs until `stop`.
std::thread signal_stream(const std::atomic<bool>& stop) {
  return std::thread([&stop] {
    while (!stop.load()) {
      kill(getpid(), SIGUSR2);
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  });
}

TEST(SignalThread, HandlersRunOnTheSignalThreadAndNeverOnTheComputingOne) {
  const int status = in_child([] {
    cadre::route_signals_to_one_thread({SIGUSR2});
    install_counting_handler();
    std::atomic<bool> stop{false};
    std::thread sender = signal_stream(stop);
    volatile double x = 0;  // the main thread computes, ready to take any signal it is allowed
    while (g_elsewhere.load() < 200 && g_on_main.load() == 0)
      for (int i = 0; i < 1000; ++i) x = x + i;
    stop = true;
    sender.join();
    std::fprintf(stderr, "handled on the signal thread %d, on the computing thread %d\n", g_elsewhere.load(),
                 g_on_main.load());
    return g_on_main.load() == 0 && g_elsewhere.load() >= 200 ? 0 : 1;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// The failure this prevents (oneDNN issue #4845): float32 linears through dnnl_sgemm while
// signals arrive. Unrouted, a handler's frame lands in the heap the JIT kernel's stack pointer
// points at, and the child aborts in free() or gets wrong products.
TEST(SignalThread, OneDnnGemmRunsRightUnderAStreamOfSignals) {
  ASSERT_TRUE(cadre::dnnl_linear_enabled()) << "float32 linears do not use oneDNN here";
  const int status = in_child([] {
    cadre::route_signals_to_one_thread({SIGUSR2});
    install_counting_handler();
    at::manual_seed(3);
    const at::Tensor x = at::randn({256, 512}), w = at::randn({384, 512});
    const at::Tensor expected = cadre::linear_no_bias(x, w);
    std::atomic<bool> stop{false};
    std::thread sender = signal_stream(stop);
    bool same = true;
    for (int i = 0; i < 400 && same; ++i) same = cadre::linear_no_bias(x, w).equal(expected);
    stop = true;
    sender.join();
    std::fprintf(stderr, "signals handled %d (on the computing thread %d); products %s\n",
                 g_elsewhere.load() + g_on_main.load(), g_on_main.load(), same ? "unchanged" : "changed");
    return same && g_elsewhere.load() > 0 && g_on_main.load() == 0 ? 0 : 1;
  });
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

}  // namespace
