// The root-cause record of a worker failure: built by the agent that saw it, shared through the
// rendezvous store, and written as a JSON error file when the job gives up.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "launch/worker_group.h"

namespace cadre::launch {

struct FailureContext {
  std::string hostname;
  int64_t group_rank = 0;
  int64_t round = 0;
  int64_t restart_count = 0;
  std::string worker_error_file;  // TORCHELASTIC_ERROR_FILE of the failed worker (may not exist)
};

// JSON: rank, local_rank, pid, exit_code or signal, stderr_tail, time (UTC ISO 8601), node...,
// and worker_error: what the worker itself wrote to its TORCHELASTIC_ERROR_FILE, if anything.
std::string failure_to_json(const WorkerExit& exit, const std::vector<std::string>& stderr_tail,
                            const FailureContext& context);

// The same record for a worker group restarted after a stall (--stall-action restart): the rank
// found without collective activity, the stall as `reason`, and the hang diagnosis (JSON text,
// "" when none was made) as `hang`.
std::string stall_failure_to_json(int64_t rank, int64_t local_rank, pid_t pid, const std::string& reason,
                                  const std::string& hang_json, const FailureContext& context);

// The agent's exit code when it gives up after `failure_json`: 2 when the failed worker exited
// with 2 (bad input: config, flags, files, which no restart or requeue can mend), else 1.
int failure_exit_code(const std::string& failure_json);

// JSON text of j with invalid UTF-8 (a worker's raw stderr, a cut error file) replaced by
// U+FFFD instead of throwing.
std::string json_dump_lenient(const nlohmann::json& j, int indent = -1);

// Human-readable lines for the console ("root cause: rank 1 ... exit code 3 ...").
std::string failure_summary(const std::string& failure_json);

// Writes {"message", "max_restarts", "root_cause": failure} atomically (temp file + rename).
void error_file_write(const std::string& path, const std::string& message, int64_t max_restarts,
                      const std::string& failure_json);

}  // namespace cadre::launch
