// The agent's view of its node for /metrics: rendezvous state, and per local worker its last
// report (over the local channel), its process as /proc shows it, and its flight recorder's
// collective totals; plus the node's GPUs. exposition() renders it all; thread-safe.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "obs/gpu_metrics.h"
#include "obs/worker_report.h"

namespace cadre::obs {

struct RoundFacts {
  int64_t number = 0, restart_count = 0, nodes = 1, world_size = 1;
};

struct LocalWorker {
  int rank = 0, local_rank = 0;
  pid_t pid = 0;
  std::string recorder_file;  // its flight recorder's shared ring ("" when none)
};

class JobMetrics {
 public:
  JobMetrics(std::string job, std::string node);

  void round_started(const RoundFacts& round, const std::vector<LocalWorker>& workers);
  void round_ended();
  void report(const WorkerReport& report);  // from the channel
  void set_hang_detected(bool detected);

  // Prometheus text of everything above (reads /proc, the recorders and NVML).
  std::string exposition();

  struct WorkerView {
    LocalWorker worker;
    std::optional<WorkerReport> last;
    std::chrono::steady_clock::time_point received;
  };
  std::vector<WorkerView> workers() const;

 private:
  struct CpuSample {
    std::chrono::steady_clock::time_point when;
    double cpu_s = 0, utilization = 0;
  };
  mutable std::mutex mutex_;
  std::string job_, node_;
  RoundFacts round_;
  int64_t rounds_total_ = 0;
  bool hang_detected_ = false;
  std::map<int, WorkerView> workers_;  // by local rank
  std::map<pid_t, CpuSample> cpu_;
  GpuMetrics gpus_;
};

}  // namespace cadre::obs
