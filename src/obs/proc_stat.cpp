// /proc/<pid>/stat and /proc/<pid>/status readers (see proc_stat.h).
#include "obs/proc_stat.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

namespace cadre::obs {

ProcStat proc_stat_read(pid_t pid) {
  ProcStat s;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return s;
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  auto paren = text.rfind(')');
  if (paren == std::string::npos) return s;
  std::istringstream fields(text.substr(paren + 1));
  std::string field;
  fields >> s.state;
  // Fields 4..13 (ppid .. cmajflt), then utime (14) and stime (15).
  for (int i = 4; i <= 13 && fields >> field; ++i) {
  }
  long long utime = 0, stime = 0;
  fields >> utime >> stime;
  static const double tick = double(::sysconf(_SC_CLK_TCK));
  s.cpu_seconds = double(utime + stime) / tick;
  s.exists = true;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    auto kb = [&](const char* key) { return std::stoll(line.substr(std::string(key).size())) * 1024; };
    if (line.rfind("VmRSS:", 0) == 0) s.rss_bytes = kb("VmRSS:");
    else if (line.rfind("VmHWM:", 0) == 0) s.peak_rss_bytes = kb("VmHWM:");
  }
  return s;
}

const char* proc_state_name(char state) {
  switch (state) {
    case 'R': return "running";
    case 'S': return "sleeping";
    case 'D': return "in uninterruptible wait (I/O)";
    case 'T': return "stopped (SIGSTOP or a job-control signal)";
    case 't': return "stopped by a debugger";
    case 'Z': return "a zombie (exited, not reaped)";
    case 'X': return "dead";
    default: return "in an unknown state";
  }
}

}  // namespace cadre::obs
