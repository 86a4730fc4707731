// SIGTERM/SIGINT recorded by an async-signal-safe handler (see stop_signal.h).
#include "train/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace cadre {
namespace {

std::atomic<int> g_received{0};
struct sigaction g_previous_term{}, g_previous_int{};

void on_signal(int sig) {
  int none = 0;
  g_received.compare_exchange_strong(none, sig);
}

}  // namespace

StopSignal::StopSignal() {
  g_received = 0;
  struct sigaction sa{};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // the second signal takes the default action
  sigaction(SIGTERM, &sa, &g_previous_term);
  sigaction(SIGINT, &sa, &g_previous_int);
}

StopSignal::~StopSignal() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
}

int StopSignal::received() const { return g_received.load(); }

}  // namespace cadre
