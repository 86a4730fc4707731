// Kills the workers' process groups when the agent dies, even by SIGKILL. PR_SET_PDEATHSIG
// reaches only each worker's top process; its children would outlive a SIGKILLed agent. So
// the agent forks a small guard process at start and tells it, over a pipe, which process
// groups exist; when the pipe reaches end-of-file (the agent is gone, however it went) the
// guard SIGKILLs every group it still knows and exits. Processes that leave their group
// (setsid) are out of its reach.
#pragma once

#include <sys/types.h>

namespace cadre::launch {

class ProcessGroupGuard {
 public:
  // Forks the guard. Call early, before the agent starts threads: the guard runs only
  // async-signal-safe code.
  ProcessGroupGuard();
  ~ProcessGroupGuard();  // the guard exits (killing whatever groups are still registered)
  ProcessGroupGuard(const ProcessGroupGuard&) = delete;
  ProcessGroupGuard& operator=(const ProcessGroupGuard&) = delete;

  void add(pid_t pgid);     // a worker's new process group
  void remove(pid_t pgid);  // that group is gone (killed and reaped): forget it, its id may be reused
  pid_t pid() const { return pid_; }

 private:
  void send(char op, pid_t pgid);
  int pipe_ = -1;  // write end
  pid_t pid_ = -1;
  bool warned_ = false;
};

}  // namespace cadre::launch
