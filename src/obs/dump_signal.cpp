// SIGUSR1 handling for flight-recorder dumps (see dump_signal.h).
#include "obs/dump_signal.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "obs/flight_recorder.h"

namespace cadre::obs {
namespace {

std::atomic<int> g_write_fd{-1};

void on_sigusr1(int) {
  int saved = errno;
  int fd = g_write_fd.load();
  if (fd >= 0) {
    char byte = 'd';
    (void)!::write(fd, &byte, 1);  // a full pipe already holds a pending request
  }
  errno = saved;
}

}  // namespace

DumpOnSignal::DumpOnSignal() {
  CADRE_CHECK(::pipe2(pipe_, O_CLOEXEC) == 0, "flight recorder: pipe: ", std::strerror(errno));
  ::fcntl(pipe_[1], F_SETFL, O_NONBLOCK);
  g_write_fd.store(pipe_[1]);
  struct sigaction sa {};
  sa.sa_handler = on_sigusr1;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGUSR1, &sa, &previous_);
  int read_fd = pipe_[0];
  thread_ = std::thread([read_fd] {
    char byte;
    for (;;) {
      ssize_t n = ::read(read_fd, &byte, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || byte == 'q') return;
      std::string path = flight_recorder_dump_now("SIGUSR1");
      if (!path.empty()) log::info("flight recorder: dumped to " + path + " (SIGUSR1)");
    }
  });
}

DumpOnSignal::~DumpOnSignal() {
  // A dump request may still arrive while the process winds down; it must never end a worker
  // that finished its work, so the default action (terminate) becomes "ignore".
  if (!(previous_.sa_flags & SA_SIGINFO) && previous_.sa_handler == SIG_DFL) previous_.sa_handler = SIG_IGN;
  ::sigaction(SIGUSR1, &previous_, nullptr);
  g_write_fd.store(-1);
  char quit = 'q';
  // Blocking write of the quit byte: the pipe may be full of requests; the thread drains it.
  ::fcntl(pipe_[1], F_SETFL, 0);
  (void)!::write(pipe_[1], &quit, 1);
  if (thread_.joinable()) thread_.join();
  ::close(pipe_[0]);
  ::close(pipe_[1]);
}

}  // namespace cadre::obs
