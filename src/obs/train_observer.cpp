// The training loop's reporting (see train_observer.h).
#include "obs/train_observer.h"

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/json_log.h"
#include "core/log.h"
#include "obs/dump_signal.h"
#include "obs/flight_recorder.h"
#include "obs/worker_channel.h"

namespace cadre::obs {

TrainObserverOptions train_observer_options(const Config& c, int rank, int world_size, const std::string& unit,
                                            double samples_per_rank_step, double units_per_rank_step) {
  TrainObserverOptions o;
  o.run_dir = c.run.dir;
  o.rank = rank;
  o.world_size = world_size;
  if (const char* local = std::getenv("LOCAL_RANK"); local && *local) o.local_rank = std::atoi(local);
  o.unit = unit;
  o.samples_per_rank_step = samples_per_rank_step;
  o.units_per_rank_step = units_per_rank_step;
  o.metrics = c.obs.metrics;
  o.stragglers = c.obs.straggler_factor > 0;
  o.straggler.factor = c.obs.straggler_factor;
  o.straggler.steps = c.obs.straggler_steps;
  return o;
}

TrainObserver::TrainObserver(TrainObserverOptions options)
    : options_(std::move(options)), tracker_(options_.straggler) {
  report_.rank = options_.rank;
  report_.local_rank = options_.local_rank;
  report_.world_size = options_.world_size;
  report_.pid = static_cast<int>(::getpid());
  report_.run_dir = std::filesystem::absolute(options_.run_dir).string();
  report_.unit = options_.unit;
  report_.straggler_tracking = options_.stragglers && options_.world_size > 1;

  FlightRecorder& recorder = flight_recorder();
  recorder.set_rank(options_.rank);
  if (recorder.enabled()) {
    dump_signal_ = std::make_unique<DumpOnSignal>();
    report_.dumps_on_sigusr1 = true;
  }
  const char* socket = std::getenv("CADRE_METRICS_SOCKET");
  if (options_.metrics && socket && *socket) {
    try {
      channel_ = std::make_unique<ChannelSender>(socket);
    } catch (const Error& e) {
      log::warn(str("metrics: ", e.what(), "; training goes on without reporting to the agent"));
    }
  }
  if (options_.rank == 0) events_ = std::make_unique<JsonLog>(options_.run_dir + "/events.jsonl", /*append=*/true);
}

TrainObserver::~TrainObserver() = default;

void TrainObserver::event(nlohmann::json record) {
  if (!events_) return;
  record["time"] = double(wall_clock_ns()) * 1e-9;
  events_->write(record);
}

void TrainObserver::send() {
  if (channel_) channel_->send(report_.to_json());
}

void TrainObserver::started(int64_t step, const std::string& resumed_from, double load_s, int64_t load_bytes) {
  report_.step = step;
  report_.resumed = !resumed_from.empty();
  report_.load_s = load_s;
  report_.load_bytes = load_bytes;
  report_.model_state_bytes = model_state_bytes_;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  event({{"event", "start"},
         {"step", step},
         {"world_size", options_.world_size},
         {"resumed_from", resumed_from},
         {"load_s", load_s},
         {"restart_count", restarts && *restarts ? std::atoll(restarts) : 0}});
  send();  // the agent learns the run directory and the dump signal before the first step
}

size_t TrainObserver::gather_slots() const {
  return report_.straggler_tracking ? size_t(3 * options_.world_size) : 0;
}

void TrainObserver::fill_slots(float* slots, const StepSplit& so_far) const {
  const size_t n = gather_slots();
  for (size_t i = 0; i < n; ++i) slots[i] = 0;
  if (!n) return;
  float* mine = slots + 3 * options_.rank;
  mine[0] = float(so_far.compute_s);
  mine[1] = float(so_far.comm_wait_s);
  mine[2] = float(so_far.data_wait_s);
}

void TrainObserver::read_slots(int64_t step, const float* slots) {
  if (!gather_slots()) return;
  last_times_.resize(size_t(options_.world_size));
  for (int r = 0; r < options_.world_size; ++r)
    last_times_[r] = {slots[3 * r], slots[3 * r + 1], slots[3 * r + 2]};
  for (const StragglerChange& change : tracker_.update(step, last_times_)) {
    if (options_.rank != 0) continue;  // every rank knows; rank 0 tells
    if (change.straggling) log::warn(change.describe());
    else log::info(change.describe());
    event({{"event", change.straggling ? "straggler" : "straggler_recovered"},
           {"step", change.step},
           {"rank", change.rank},
           {"ratio", change.ratio},
           {"cause", change.cause}});
  }
  report_.straggling = tracker_.straggling(options_.rank);
  report_.straggler_ratio = tracker_.ratio(options_.rank);
  report_.straggler_cause = tracker_.cause(options_.rank);
}

void TrainObserver::checkpoint_staged(int64_t step, double blocked_s) {
  report_.save_blocked_s = blocked_s;
  event({{"event", "checkpoint_staged"}, {"step", step}, {"blocked_s", blocked_s}});
}

void TrainObserver::checkpoint_committed(int64_t step, int64_t bytes, double seconds) {
  if (step <= 0 || step == last_saved_step_) return;
  last_saved_step_ = step;
  report_.saves_total += 1;
  report_.save_bytes_total += bytes;
  report_.save_s = seconds;
  event({{"event", "checkpoint"}, {"step", step}, {"seconds", seconds}, {"bytes", bytes}});
}

void TrainObserver::validated(double val_loss) {
  report_.has_val_loss = true;
  report_.val_loss = val_loss;
}

void TrainObserver::step_done(int64_t step, const StepSplit& split, double loss, double grad_norm, double lr,
                              nlohmann::json& record) {
  report_.step = step;
  report_.last = split;
  report_.totals.total_s += split.total_s;
  report_.totals.compute_s += split.compute_s;
  report_.totals.comm_wait_s += split.comm_wait_s;
  report_.totals.data_wait_s += split.data_wait_s;
  report_.steps_total += 1;
  report_.units_total += options_.units_per_rank_step;
  report_.samples_total += options_.samples_per_rank_step;
  report_.units_per_s = split.total_s > 0 ? options_.units_per_rank_step / split.total_s : 0;
  report_.samples_per_s = split.total_s > 0 ? options_.samples_per_rank_step / split.total_s : 0;
  report_.loss = loss;
  report_.grad_norm = grad_norm;
  report_.lr = lr;
  report_.model_state_bytes = model_state_bytes_;
  send();

  record["compute_s"] = split.compute_s;
  record["comm_wait_s"] = split.comm_wait_s;
  record["data_wait_s"] = split.data_wait_s;
  if (!last_times_.empty()) {
    // Every rank's times up to the loss all-reduce (forward, backward and gradient reductions).
    nlohmann::json busy = nlohmann::json::array(), compute = nlohmann::json::array(),
                   wait = nlohmann::json::array(), data = nlohmann::json::array(), slow = nlohmann::json::array();
    for (size_t r = 0; r < last_times_.size(); ++r) {
      busy.push_back(last_times_[r].busy_s());
      compute.push_back(last_times_[r].compute_s);
      wait.push_back(last_times_[r].comm_wait_s);
      data.push_back(last_times_[r].data_wait_s);
      if (tracker_.straggling(int(r))) slow.push_back(r);
    }
    record["rank_busy_s"] = busy;
    record["rank_compute_s"] = compute;
    record["rank_comm_wait_s"] = wait;
    record["rank_data_wait_s"] = data;
    if (!slow.empty()) record["stragglers"] = slow;
  }
}

void TrainObserver::finished(int64_t step, const std::string& how) {
  event({{"event", "end"}, {"step", step}, {"how", how}});
  report_.dumps_on_sigusr1 = false;  // the agent asks no more
  send();
}

}  // namespace cadre::obs
