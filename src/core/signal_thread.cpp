// The thread that process-directed signals are handled on (see signal_thread.h).
#include "core/signal_thread.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "core/error.h"

namespace cadre {
namespace {

sigset_t g_routed;        // the signals blocked outside the signal thread
sigset_t g_before;        // the calling thread's mask before: a forked child's
bool g_routing = false;

void restore_mask_in_child() { pthread_sigmask(SIG_SETMASK, &g_before, nullptr); }

}  // namespace

void route_signals_to_one_thread(std::initializer_list<int> signals) {
  CADRE_CHECK(!g_routing, "route_signals_to_one_thread: called twice");
  sigemptyset(&g_routed);
  for (int s : signals) sigaddset(&g_routed, s);
  int rc = pthread_sigmask(SIG_BLOCK, &g_routed, &g_before);
  CADRE_CHECK(rc == 0, "pthread_sigmask: ", std::strerror(rc));
  rc = pthread_atfork(nullptr, nullptr, restore_mask_in_child);
  CADRE_CHECK(rc == 0, "pthread_atfork: ", std::strerror(rc));
  g_routing = true;
  std::thread([] {
    pthread_sigmask(SIG_UNBLOCK, &g_routed, nullptr);
    for (;;) pause();  // handlers run here; the process's exit ends the thread
  }).detach();
}

}  // namespace cadre
