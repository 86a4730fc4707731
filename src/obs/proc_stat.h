// A process as /proc shows it: run state, CPU time and memory. The agent reads its workers
// this way, so the figures stay live when a worker is stuck or stopped.
#pragma once

#include <sys/types.h>

#include <cstdint>

namespace cadre::obs {

struct ProcStat {
  bool exists = false;
  char state = '?';            // R running, S sleeping, D disk wait, T stopped, Z zombie, ...
  double cpu_seconds = 0;      // user + system
  int64_t rss_bytes = 0, peak_rss_bytes = 0;
};

ProcStat proc_stat_read(pid_t pid);
// Stopped by a signal (SIGSTOP, SIGTSTP) or held by a debugger: alive, but runs nothing.
inline bool proc_is_stopped(const ProcStat& p) { return p.exists && (p.state == 'T' || p.state == 't'); }
const char* proc_state_name(char state);  // "running", "stopped (SIGSTOP or a debugger)", ...

}  // namespace cadre::obs
