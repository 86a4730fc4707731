// The process-group guard (see group_guard.h).
#include "launch/group_guard.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/log.h"
#include "launch/child_wait.h"

namespace cadre::launch {
namespace {

// One message: an operation ('+' add, '-' remove) and a process group id.
struct Message {
  char op;
  pid_t pgid;
};

// The guard's whole life, after fork: async-signal-safe calls only (the agent may have had
// other threads at fork time), no allocation, a fixed table.
[[noreturn]] void guard_main(int in) {
  // A terminal's Ctrl-C or a signal to the agent's group must not take the guard away first.
  ::setpgid(0, 0);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::signal(sig, SIG_IGN);
  if (in > 0) ::close_range(0, static_cast<unsigned>(in) - 1, 0);
  ::close_range(static_cast<unsigned>(in) + 1, ~0U, 0);
  constexpr int kMaxGroups = 4096;
  static pid_t groups[kMaxGroups];
  int count = 0;
  Message m;
  for (;;) {
    ssize_t n = ::read(in, &m, sizeof m);
    if (n < 0 && errno == EINTR) continue;
    if (n != static_cast<ssize_t>(sizeof m)) break;  // end of file: the agent is gone
    if (m.op == '+' && count < kMaxGroups) {
      groups[count++] = m.pgid;
    } else if (m.op == '-') {
      for (int i = 0; i < count; ++i)
        if (groups[i] == m.pgid) groups[i] = groups[--count];
    }
  }
  for (int i = 0; i < count; ++i) ::kill(-groups[i], SIGKILL);
  ::_exit(0);
}

}  // namespace

ProcessGroupGuard::ProcessGroupGuard() {
  int fds[2];
  CADRE_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "process group guard: pipe: ", std::strerror(errno));
  pid_ = ::fork();
  if (pid_ < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    throw Error(str("process group guard: fork: ", std::strerror(err)));
  }
  if (pid_ == 0) guard_main(fds[0]);
  ::close(fds[0]);
  pipe_ = fds[1];
}

ProcessGroupGuard::~ProcessGroupGuard() {
  ::close(pipe_);
  int status = 0;
  waitpid_retrying(pid_, &status, 0);
}

void ProcessGroupGuard::send(char op, pid_t pgid) {
  const Message m{op, pgid};
  // A pipe write of a few bytes is atomic; the guard reads as fast as groups are created.
  ssize_t n;
  do {
    n = ::write(pipe_, &m, sizeof m);
  } while (n < 0 && errno == EINTR);
  // The guard is a safety net for the agent's own death: losing it must not stop the job.
  if (n != static_cast<ssize_t>(sizeof m) && !warned_) {
    warned_ = true;
    log::warn(str("process group guard (pid ", pid_, ") is gone (", n < 0 ? std::strerror(errno) : "short write",
                  "): if this agent is killed, its workers' children may survive it"));
  }
}

void ProcessGroupGuard::add(pid_t pgid) { send('+', pgid); }
void ProcessGroupGuard::remove(pid_t pgid) { send('-', pgid); }

}  // namespace cadre::launch
