// Agent signal handling (see signals.h).
#include "launch/signals.h"

#include <signal.h>

#include <atomic>

namespace cadre::launch {
namespace {
std::atomic<int> g_signal{0};
void on_signal(int sig) { g_signal = sig; }
}  // namespace

void signals_install() {
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

int signals_received() { return g_signal.load(); }

int signal_for_workers(int sig) { return sig == SIGHUP ? SIGTERM : sig; }

}  // namespace cadre::launch
