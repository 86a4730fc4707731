// waitpid that is not cut short by signals: the agent's signal handlers are installed without
// SA_RESTART (its loops must notice a signal at once), so a blocking waitpid can return EINTR
// while the child still runs; taking that for the child's end would lose its exit status.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <cerrno>

namespace cadre::launch {

inline pid_t waitpid_retrying(pid_t pid, int* status, int options) {
  pid_t r;
  do {
    r = ::waitpid(pid, status, options);
  } while (r < 0 && errno == EINTR);
  return r;
}

}  // namespace cadre::launch
