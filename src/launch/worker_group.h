// The workers of one node for one rendezvous round: fork/exec each in its own process group (so
// its whole tree can be signalled), with PR_SET_PDEATHSIG so they die with the agent and their
// groups registered with the agent's ProcessGroupGuard so their children do too, output piped
// through a LogForwarder, reaped with waitpid.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "launch/group_guard.h"
#include "launch/log_forwarder.h"
#include "rdzv/membership.h"

namespace cadre::launch {

struct WorkerSpec {
  int64_t local_rank = 0, global_rank = 0;
  std::vector<std::pair<std::string, std::string>> env;  // set on top of the agent's environment
  std::string stdout_path, stderr_path;
  std::string error_file_path;  // given to the worker as TORCHELASTIC_ERROR_FILE
};

struct WorkerExit {
  int64_t local_rank = 0, global_rank = 0;
  pid_t pid = 0;
  int exit_code = 0;  // when exited normally
  int signal = 0;     // when killed by a signal
  bool failed() const { return exit_code != 0 || signal != 0; }
  std::string describe() const;  // "exit code 3" / "signal 9 (SIGKILL)"
};

// Absolute path of the program to run: as given when it contains '/', else searched in PATH;
// `cadre` falls back to this executable. Throws ConfigError when not found.
std::string program_resolve(const std::string& program);

class WorkerGroup {
 public:
  // Starts every worker; argv[0] must be resolved (program_resolve). `guard` (optional) learns
  // each worker's process group while it exists. `inherited_fd` (optional) becomes each
  // worker's descriptor kInheritedFd (the job secret's; nothing else is inherited).
  // `channels`: each worker also gets one end of a socket pair as descriptor kChannelFd
  // (in-memory recovery's membership channel, rdzv/membership.h); the agent keeps the other.
  WorkerGroup(const std::vector<std::string>& argv, std::vector<WorkerSpec> workers,
              ProcessGroupGuard* guard = nullptr, int inherited_fd = -1, bool channels = false);
  static constexpr int kInheritedFd = 3;
  static constexpr int kChannelFd = 4;
  ~WorkerGroup();  // stop(SIGKILL, 0) if anything is still running

  enum class State { Running, Succeeded, Failed };
  // Reaps exited workers without blocking. Failed as soon as any worker failed.
  State poll();
  // The first worker that failed (by the time it was reaped), or nullptr.
  const WorkerExit* first_failure() const;

  // Sends `signal` to every worker's process group, waits up to grace_s, then SIGKILLs what is
  // left and reaps everything (including the workers' own children).
  void stop(int signal, double grace_s);

  std::vector<std::string> stderr_tail(int64_t local_rank) const;
  const std::vector<WorkerSpec>& specs() const { return specs_; }
  pid_t pid(int64_t local_rank) const { return pids_[size_t(local_rank)]; }
  bool running(int64_t local_rank) const { return running_[size_t(local_rank)]; }

  // The membership channel (channels only): a line to a worker (false when it cannot take it),
  // and the lines workers wrote since the last call.
  bool send_line(int64_t local_rank, const std::string& line);
  std::vector<std::string> read_lines();
  // Logs and rank numbers of a worker that goes on into the next round.
  void respecify(int64_t local_rank, WorkerSpec spec);

 private:
  bool reap_one(size_t i, bool block);

  std::vector<WorkerSpec> specs_;
  ProcessGroupGuard* guard_ = nullptr;
  std::vector<pid_t> pids_;
  std::vector<bool> running_;
  std::vector<WorkerExit> exits_;
  std::unique_ptr<WorkerExit> first_failure_;
  std::unique_ptr<LogForwarder> logs_;
  std::vector<int> channels_;  // the agent's ends (channels only)
  std::vector<rdzv::LineReader> channel_readers_;
};

}  // namespace cadre::launch
