// Whether a run fits the memory it is given, decided before it allocates: the limit is
// train.memory_limit (per rank) or the memory cgroup the process is in (shared by the ranks of
// this machine that are in the same one), whichever is tighter; a run that does not fit stops
// with its estimate and exit code 2 instead of being killed by the kernel part way in.
#pragma once

#include <cstdint>
#include <string>

#include "train/memory_estimate.h"

namespace cadre {

// The memory cgroup's limit on this process in bytes, and which file says so (cgroup v1
// memory.limit_in_bytes or v2 memory.max, the nearest limited ancestor); -1 when unlimited.
struct CgroupLimit {
  int64_t bytes = -1;
  std::string file;
};
CgroupLimit memory_cgroup_limit();

struct FitCheck {
  MemoryEstimate estimate;
  // What the process holds besides the estimate: its anonymous resident memory before the model
  // (the runtime, the communicators); mapped libraries are left out, as the kernel reclaims
  // their clean pages before it kills anything in a cgroup.
  int64_t baseline = 0;
  int64_t config_limit = -1;   // train.memory_limit per rank (-1: none)
  CgroupLimit cgroup;
  int cgroup_ranks = 1;        // ranks of this job in the same cgroup on this machine
  // The smallest headroom: limit - need, over the limits that apply (none: INT64_MAX).
  int64_t headroom() const;
  std::string to_text() const;  // the estimate, and each limit with what it must hold
};

// Throws ConfigError with the check's text when a limit is exceeded.
void require_fit(const FitCheck& check, int rank);

}  // namespace cadre
