// What the training loop reports, in one object: the step's time split and throughput to the
// agent (worker_report over the local channel, when CADRE_METRICS_SOCKET is set), every rank's
// busy time piggybacked on the loss all-reduce for straggler attribution, events (start,
// checkpoint, straggler, end) into <run_dir>/events.jsonl, and the flight recorder's dumps
// (into <run_dir>/flight_recorder/, on SIGUSR1 or a communication failure).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "obs/step_timer.h"
#include "obs/straggler_tracker.h"
#include "obs/worker_report.h"

namespace cadre {
class JsonLog;
}

namespace cadre::obs {

class ChannelSender;
class DumpOnSignal;

struct TrainObserverOptions {
  std::string run_dir;
  int rank = 0, world_size = 1, local_rank = 0;
  std::string unit = "tokens";      // the model's throughput unit
  double units_per_rank_step = 0;   // tokens (or images) one rank trains on per step
  double samples_per_rank_step = 0;
  bool metrics = true;              // report to the agent (when one listens)
  bool stragglers = true;           // gather every rank's times on the loss all-reduce
  StragglerOptions straggler;
};

// From the run's config (obs.*, run.dir) and the environment (LOCAL_RANK).
TrainObserverOptions train_observer_options(const Config& config, int rank, int world_size, const std::string& unit,
                                            double samples_per_rank_step, double units_per_rank_step);

class TrainObserver {
 public:
  explicit TrainObserver(TrainObserverOptions options);
  ~TrainObserver();
  TrainObserver(const TrainObserver&) = delete;
  TrainObserver& operator=(const TrainObserver&) = delete;

  void started(int64_t step, const std::string& resumed_from, double load_s, int64_t load_bytes);
  void set_model_state_bytes(int64_t bytes) { model_state_bytes_ = bytes; }

  // Straggler data rides on the loss all-reduce (a sum): gather_slots() more floats, zero but
  // for this rank's own (compute, comm wait, data wait) so far in the step; after the
  // all-reduce read_slots() sees every rank's.
  size_t gather_slots() const;
  void fill_slots(float* slots, const StepSplit& so_far) const;
  void read_slots(int64_t step, const float* slots);

  void checkpoint_staged(int64_t step, double blocked_s);
  // The saver's last committed save (called every step; a new step counts once).
  void checkpoint_committed(int64_t step, int64_t bytes, double seconds);
  void validated(double val_loss);
  // End of a step: sends the report and adds the split (and every rank's times) to `record`.
  void step_done(int64_t step, const StepSplit& split, double loss, double grad_norm, double lr,
                 nlohmann::json& record);
  void finished(int64_t step, const std::string& how);

  const StragglerTracker& stragglers() const { return tracker_; }

 private:
  void event(nlohmann::json record);
  void send();

  TrainObserverOptions options_;
  std::unique_ptr<ChannelSender> channel_;
  std::unique_ptr<DumpOnSignal> dump_signal_;
  std::unique_ptr<JsonLog> events_;
  StragglerTracker tracker_;
  std::vector<RankTimes> last_times_;  // every rank's, from the last read_slots
  WorkerReport report_;
  int64_t model_state_bytes_ = 0;
  int64_t last_saved_step_ = -1;
};

}  // namespace cadre::obs
