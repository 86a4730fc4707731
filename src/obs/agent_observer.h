// What `cadre run`'s agent adds for observability, kept out of the agent loop: the local
// channel its workers report on, /metrics (--metrics-port), and stall detection. A stall is a
// local worker with no collective activity (none issued, started or finished) for
// --stall-timeout seconds after it had some (checked once a second). Then the agent asks its workers for
// flight-recorder dumps (SIGUSR1), writes the dumps of workers that cannot answer (stopped,
// stuck) from their shared rings itself, diagnoses which rank the others wait for
// (hang_diagnosis.h) and writes that to the log and the error file. It does not stop the
// workers: the collective's own timeout (parallel.comm_timeout) ends the round as before.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "obs/hang_diagnosis.h"
#include "obs/job_metrics.h"

namespace cadre::obs {

class ChannelReceiver;
class MetricsServer;

struct AgentObserverOptions {
  std::string job = "none";        // --rdzv-id
  std::string node;                // hostname
  std::string metrics_addr = "127.0.0.1";
  int metrics_port = -1;           // -1: no /metrics; 0: any free port
  double stall_timeout_s = 0;      // 0: no stall detection
  bool stall_restarts = false;     // --stall-action restart: a stall ends the round as a failure
  std::string error_file;          // where a diagnosed hang is written
  std::string log_dir;             // metrics.url goes here when serving
};

class AgentObserver {
 public:
  explicit AgentObserver(AgentObserverOptions options);
  ~AgentObserver();
  AgentObserver(const AgentObserver&) = delete;
  AgentObserver& operator=(const AgentObserver&) = delete;

  int metrics_port() const;  // -1 when not serving

  // Environment for one worker of a round (the channel name, its flight recorder's file).
  std::vector<std::pair<std::string, std::string>> worker_env(const std::string& rank_dir) const;
  static std::string recorder_file(const std::string& rank_dir) { return rank_dir + "/flight_recorder.bin"; }
  void round_started(const RoundFacts& round, const std::vector<LocalWorker>& workers);
  void round_ended();
  // From the agent's monitor loop: stall detection (cheap; rate-limited inside).
  void poll();
  // After the agent wrote its give-up error file: adds the round's hang diagnosis, if any.
  void annotate_error_file();
  // The job succeeded after all: a hang diagnosis written to the error file moves to hang.json.
  void job_succeeded();

  const HangDiagnosis* last_hang() const { return hang_ ? &*hang_ : nullptr; }
  // With --stall-action restart: a stall was found in this round and its dumps have had their
  // moment (2 s; none when this node's workers are all stopped or gone, so none was asked for
  // one); the agent should now restart the group. stall_reason() says what was found (the
  // diagnosis when there is one), stalled_rank() whom it names: a stopped rank, else one that did
  // not enter the stalled op, else the first local rank found quiet.
  bool restart_due() const;
  std::string stall_reason() const;
  int stalled_rank() const;
  // Whether this node holds the stall's cause: a rank the hang diagnosis names (stopped, or not
  // in the stalled op), or, with no diagnosis, a worker of this node that is stopped or was found
  // quiet outside any collective. A worker merely waiting inside a collective is a victim:
  // --recovery memory keeps it.
  bool stall_cause_is_local() const;
  JobMetrics& metrics() { return *metrics_; }

 private:
  void on_stall(int rank, const std::string& why, bool outside_collectives);
  void diagnose();
  std::string run_dir() const;

  AgentObserverOptions options_;
  std::unique_ptr<JobMetrics> metrics_;
  std::unique_ptr<ChannelReceiver> channel_;
  std::unique_ptr<MetricsServer> server_;
  std::thread receiver_;
  std::atomic<bool> stopping_{false};

  RoundFacts round_;
  std::vector<LocalWorker> workers_;
  std::chrono::steady_clock::time_point last_poll_{};
  int64_t round_started_ns_ = 0;  // wall clock (as flight-recorder times) when this round's workers started
  bool stalled_ = false;
  std::chrono::steady_clock::time_point stalled_at_{};
  std::string stall_reason_;  // the first stall of this round
  int stalled_rank_ = -1;
  bool stalled_outside_collectives_ = false;  // that rank was in no collective when found quiet
  int dumps_asked_ = 0;  // this node's workers sent SIGUSR1 at the stall (the others are stopped or gone)
  std::chrono::steady_clock::time_point last_diagnosis_{};
  std::optional<HangDiagnosis> hang_;
};

}  // namespace cadre::obs
