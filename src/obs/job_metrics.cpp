// The agent's metrics (see job_metrics.h).
#include "obs/job_metrics.h"

#include <unistd.h>

#include "core/error.h"
#include "obs/flight_recorder.h"
#include "obs/metric_registry.h"
#include "obs/proc_stat.h"

namespace cadre::obs {

JobMetrics::JobMetrics(std::string job, std::string node) : job_(std::move(job)), node_(std::move(node)) {}

void JobMetrics::round_started(const RoundFacts& round, const std::vector<LocalWorker>& workers) {
  std::lock_guard<std::mutex> lock(mutex_);
  round_ = round;
  ++rounds_total_;
  hang_detected_ = false;
  workers_.clear();
  for (const auto& w : workers) workers_[w.local_rank] = WorkerView{w, std::nullopt, {}};
}

void JobMetrics::round_ended() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [local, view] : workers_) view.worker.pid = 0;  // gone; their last reports stay visible
}

void JobMetrics::report(const WorkerReport& report) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = workers_.find(report.local_rank);
  // A report from a worker of an earlier round (still exiting) is not this round's.
  if (it == workers_.end() || it->second.worker.rank != report.rank || report.world_size != round_.world_size) return;
  it->second.last = report;
  it->second.received = std::chrono::steady_clock::now();
}

void JobMetrics::set_hang_detected(bool detected) {
  std::lock_guard<std::mutex> lock(mutex_);
  hang_detected_ = detected;
}

std::vector<JobMetrics::WorkerView> JobMetrics::workers() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<WorkerView> out;
  for (const auto& [local, view] : workers_) out.push_back(view);
  return out;
}

std::string JobMetrics::exposition() {
  std::lock_guard<std::mutex> lock(mutex_);
  MetricRegistry m;
  const Labels node{{"job", job_}, {"node", node_}};
  m.set("cadre_restarts_total", node, double(round_.restart_count));
  m.set("cadre_rendezvous_round", node, double(round_.number));
  m.set("cadre_rendezvous_rounds_total", node, double(rounds_total_));
  m.set("cadre_nodes", node, double(round_.nodes));
  m.set("cadre_world_size", node, double(round_.world_size));
  m.set("cadre_local_workers", node, double(workers_.size()));
  m.set("cadre_hang_detected", node, hang_detected_ ? 1 : 0);

  const auto now = std::chrono::steady_clock::now();
  const int64_t now_ns = wall_clock_ns();
  for (auto& [local, view] : workers_) {
    const LocalWorker& w = view.worker;
    const Labels labels{{"job", job_}, {"node", node_}, {"rank", std::to_string(w.rank)},
                        {"local_rank", std::to_string(w.local_rank)}};
    // The process itself, live even when it is stuck.
    ProcStat p = w.pid > 0 ? proc_stat_read(w.pid) : ProcStat{};
    const bool up = p.exists && p.state != 'Z' && p.state != 'X' && !proc_is_stopped(p);
    m.set("cadre_worker_up", labels, up ? 1 : 0);
    if (p.exists) {
      m.set("cadre_worker_resident_memory_bytes", labels, double(p.rss_bytes));
      m.set("cadre_worker_resident_memory_peak_bytes", labels, double(p.peak_rss_bytes));
      m.set("cadre_worker_cpu_seconds_total", labels, p.cpu_seconds);
      CpuSample& c = cpu_[w.pid];
      const double dt = std::chrono::duration<double>(now - c.when).count();
      if (c.when.time_since_epoch().count() && dt > 0.2) c.utilization = (p.cpu_seconds - c.cpu_s) / dt;
      if (!c.when.time_since_epoch().count() || dt > 0.2) {
        c.when = now;
        c.cpu_s = p.cpu_seconds;
      }
      m.set("cadre_worker_cpu_utilization_ratio", labels, c.utilization);
    }
    // Its collectives, from the shared ring.
    if (!w.recorder_file.empty()) {
      try {
        // The newest entries hold what is in flight; the totals are kept apart.
        FlightRecorderState fr = flight_recorder_read_file(w.recorder_file, 64);
        for (const auto& t : fr.totals) {
          Labels op = labels;
          op.emplace_back("op", t.op);
          m.set("cadre_collective_ops_total", op, double(t.count));
          m.set("cadre_collective_bytes_total", op, double(t.bytes));
          m.set("cadre_collective_seconds_total", op, t.seconds);
        }
        double in_flight = 0;
        int64_t last_seq = 0;
        for (const auto& r : fr.records) {
          if (r.state == CollectiveState::Started) in_flight = std::max(in_flight, double(now_ns - r.started_ns) * 1e-9);
          if (r.group == "world" && r.seq > last_seq) last_seq = r.seq;
        }
        m.set("cadre_collective_in_flight_seconds", labels, in_flight);
        m.set("cadre_collective_last_seq", labels, double(last_seq));
      } catch (const Error&) {
        // Not created yet (the worker is still starting): nothing to show.
      }
    }
    if (!view.last) continue;
    const WorkerReport& r = *view.last;
    m.set("cadre_worker_report_age_seconds", labels, std::chrono::duration<double>(now - view.received).count());
    m.set("cadre_train_step", labels, double(r.step));
    m.set("cadre_train_steps_total", labels, double(r.steps_total));
    if (r.steps_total > 0) {
      m.set("cadre_step_seconds", labels, r.last.total_s);
      m.set("cadre_step_compute_seconds", labels, r.last.compute_s);
      m.set("cadre_step_comm_wait_seconds", labels, r.last.comm_wait_s);
      m.set("cadre_step_data_wait_seconds", labels, r.last.data_wait_s);
      m.set("cadre_loss", labels, r.loss);
      m.set("cadre_grad_norm", labels, r.grad_norm);
      m.set("cadre_learning_rate", labels, r.lr);
    }
    m.set("cadre_step_seconds_total", labels, r.totals.total_s);
    m.set("cadre_compute_seconds_total", labels, r.totals.compute_s);
    m.set("cadre_comm_wait_seconds_total", labels, r.totals.comm_wait_s);
    m.set("cadre_data_wait_seconds_total", labels, r.totals.data_wait_s);
    if (r.unit == "tokens") {
      m.set("cadre_tokens_total", labels, r.units_total);
      m.set("cadre_tokens_per_second", labels, r.units_per_s);
    }
    m.set("cadre_samples_total", labels, r.samples_total);
    m.set("cadre_samples_per_second", labels, r.samples_per_s);
    if (r.has_val_loss) m.set("cadre_validation_loss", labels, r.val_loss);
    m.set("cadre_model_state_bytes", labels, double(r.model_state_bytes));
    if (r.saves_total > 0) {
      m.set("cadre_checkpoint_saves_total", labels, double(r.saves_total));
      m.set("cadre_checkpoint_save_seconds", labels, r.save_s);
      m.set("cadre_checkpoint_save_blocked_seconds", labels, r.save_blocked_s);
      m.set("cadre_checkpoint_save_bytes_total", labels, double(r.save_bytes_total));
    }
    if (r.resumed) {
      m.set("cadre_checkpoint_load_seconds", labels, r.load_s);
      m.set("cadre_checkpoint_load_bytes", labels, double(r.load_bytes));
    }
    if (r.straggler_tracking) {
      m.set("cadre_straggler", labels, r.straggling ? 1 : 0);
      m.set("cadre_straggler_slowdown_ratio", labels, r.straggler_ratio);
    }
  }
  for (const GpuSample& g : gpus_.sample()) {
    const Labels labels{{"gpu", std::to_string(g.index)},
                        {"UUID", g.uuid},
                        {"device", "nvidia" + std::to_string(g.minor)},
                        {"modelName", g.model},
                        {"Hostname", node_}};
    m.set("DCGM_FI_DEV_GPU_UTIL", labels, g.util_percent);
    m.set("DCGM_FI_DEV_MEM_COPY_UTIL", labels, g.mem_copy_util_percent);
    m.set("DCGM_FI_DEV_FB_USED", labels, g.fb_used_mib);
    m.set("DCGM_FI_DEV_FB_FREE", labels, g.fb_free_mib);
    m.set("DCGM_FI_DEV_POWER_USAGE", labels, g.power_w);
    m.set("DCGM_FI_DEV_GPU_TEMP", labels, g.temp_c);
    m.set("DCGM_FI_DEV_SM_CLOCK", labels, g.sm_clock_mhz);
  }
  return m.exposition();
}

}  // namespace cadre::obs
