// The list of exported metrics (see metric_catalog.h). Names follow Prometheus conventions:
// `cadre_` prefix, base units (seconds, bytes), `_total` on counters and nowhere else.
#include "obs/metric_catalog.h"

#include "core/error.h"

namespace cadre::obs {

const std::vector<MetricDef>& metric_catalog() {
  using T = MetricType;
  using S = MetricScope;
  using W = MetricWhen;
  static const std::vector<MetricDef> catalog = {
      // Training progress, per worker.
      {"cadre_train_step", T::Gauge, S::Rank, W::Always, "Last completed training step."},
      {"cadre_train_steps_total", T::Counter, S::Rank, W::Always, "Training steps completed by this worker process."},
      {"cadre_step_seconds", T::Gauge, S::Rank, W::Always, "Wall time of the last step."},
      {"cadre_step_compute_seconds", T::Gauge, S::Rank, W::Always,
       "Part of the last step spent computing (step time minus communication and data waits)."},
      {"cadre_step_comm_wait_seconds", T::Gauge, S::Rank, W::Always,
       "Part of the last step the training thread spent blocked on collectives."},
      {"cadre_step_data_wait_seconds", T::Gauge, S::Rank, W::Always,
       "Part of the last step spent waiting for the next batch."},
      {"cadre_step_seconds_total", T::Counter, S::Rank, W::Always, "Wall time of all steps."},
      {"cadre_compute_seconds_total", T::Counter, S::Rank, W::Always, "Compute time of all steps."},
      {"cadre_comm_wait_seconds_total", T::Counter, S::Rank, W::Always, "Time blocked on collectives in all steps."},
      {"cadre_data_wait_seconds_total", T::Counter, S::Rank, W::Always, "Time waiting for data in all steps."},
      {"cadre_tokens_total", T::Counter, S::Rank, W::Always, "Tokens this worker trained on (token models)."},
      {"cadre_tokens_per_second", T::Gauge, S::Rank, W::Always, "This worker's tokens per second in the last step."},
      {"cadre_samples_total", T::Counter, S::Rank, W::Always, "Samples (sequences or images) this worker trained on."},
      {"cadre_samples_per_second", T::Gauge, S::Rank, W::Always, "This worker's samples per second in the last step."},
      {"cadre_loss", T::Gauge, S::Rank, W::Always, "Training loss of the last step (mean over ranks)."},
      {"cadre_validation_loss", T::Gauge, S::Rank, W::AfterValidation, "Last validation loss."},
      {"cadre_grad_norm", T::Gauge, S::Rank, W::Always, "Global gradient norm of the last step, before clipping."},
      {"cadre_learning_rate", T::Gauge, S::Rank, W::Always, "Learning rate of the last step."},
      // Memory and CPU, per worker (read by the agent from /proc, so they stay live in a hang).
      {"cadre_model_state_bytes", T::Gauge, S::Rank, W::Always,
       "Model state this rank holds: parameter shards, gradients and optimizer moments."},
      {"cadre_worker_resident_memory_bytes", T::Gauge, S::Rank, W::Always, "Resident set size of the worker process."},
      {"cadre_worker_resident_memory_peak_bytes", T::Gauge, S::Rank, W::Always,
       "Peak resident set size of the worker process."},
      {"cadre_worker_cpu_seconds_total", T::Counter, S::Rank, W::Always, "CPU time (user + system) of the worker process."},
      {"cadre_worker_cpu_utilization_ratio", T::Gauge, S::Rank, W::Always,
       "CPU cores the worker kept busy since the previous scrape (1 = one core)."},
      {"cadre_worker_up", T::Gauge, S::Rank, W::Always, "1 while the worker process runs, 0 when it is stopped or gone."},
      {"cadre_worker_report_age_seconds", T::Gauge, S::Rank, W::Always, "Seconds since the worker last reported a step."},
      // Collectives, per worker and op (from the flight recorder's totals).
      {"cadre_collective_ops_total", T::Counter, S::Op, W::Always, "Collectives completed, by op."},
      {"cadre_collective_bytes_total", T::Counter, S::Op, W::Always, "Bytes of collective inputs, by op."},
      {"cadre_collective_seconds_total", T::Counter, S::Op, W::Always,
       "Time collectives ran on the communication thread, start to end, by op."},
      {"cadre_collective_in_flight_seconds", T::Gauge, S::Rank, W::Always,
       "Age of the oldest collective this worker started and has not finished (0 when none)."},
      {"cadre_collective_last_seq", T::Gauge, S::Rank, W::Always,
       "Sequence number of the last collective this worker started on its world group."},
      // Checkpoints, per worker.
      {"cadre_checkpoint_saves_total", T::Counter, S::Rank, W::AfterCheckpoint, "Checkpoints this worker saved."},
      {"cadre_checkpoint_save_seconds", T::Gauge, S::Rank, W::AfterCheckpoint,
       "Last save, from submit to committed, as this worker saw it."},
      {"cadre_checkpoint_save_blocked_seconds", T::Gauge, S::Rank, W::AfterCheckpoint,
       "Part of the last save that stopped training (waiting for the previous save, staging the copy)."},
      {"cadre_checkpoint_save_bytes_total", T::Counter, S::Rank, W::AfterCheckpoint, "Bytes this worker wrote to checkpoints."},
      {"cadre_checkpoint_load_seconds", T::Gauge, S::Rank, W::AfterResume, "Time to find, read and verify the checkpoint resumed from."},
      {"cadre_checkpoint_load_bytes", T::Gauge, S::Rank, W::AfterResume, "Bytes of state this worker loaded when resuming."},
      // Stragglers, per worker.
      {"cadre_straggler", T::Gauge, S::Rank, W::WithStragglers,
       "1 while this rank is persistently slower than the other ranks' median by the configured factor."},
      {"cadre_straggler_slowdown_ratio", T::Gauge, S::Rank, W::WithStragglers,
       "This rank's busy time (compute + data wait) over the other ranks' median (median of the last obs.straggler_steps steps)."},
      // The agent: rendezvous and restarts.
      {"cadre_restarts_total", T::Counter, S::Node, W::Always, "Group restarts after worker failures in this job."},
      {"cadre_rendezvous_round", T::Gauge, S::Node, W::Always, "Current rendezvous round."},
      {"cadre_rendezvous_rounds_total", T::Counter, S::Node, W::Always, "Rendezvous rounds this agent took part in."},
      {"cadre_nodes", T::Gauge, S::Node, W::Always, "Nodes in the current round."},
      {"cadre_world_size", T::Gauge, S::Node, W::Always, "Workers in the current round, all nodes."},
      {"cadre_local_workers", T::Gauge, S::Node, W::Always, "Workers this agent runs."},
      {"cadre_hang_detected", T::Gauge, S::Node, W::Always,
       "1 after the agent found a collective stalled in this round (see the error file)."},
      // GPUs, in the DCGM exporter's names and labels (NVML; CUDA machines only).
      {"DCGM_FI_DEV_GPU_UTIL", T::Gauge, S::Gpu, W::OnGpu, "GPU utilization (in %)."},
      {"DCGM_FI_DEV_MEM_COPY_UTIL", T::Gauge, S::Gpu, W::OnGpu, "Memory utilization (in %)."},
      {"DCGM_FI_DEV_FB_USED", T::Gauge, S::Gpu, W::OnGpu, "Framebuffer memory used (in MiB)."},
      {"DCGM_FI_DEV_FB_FREE", T::Gauge, S::Gpu, W::OnGpu, "Framebuffer memory free (in MiB)."},
      {"DCGM_FI_DEV_POWER_USAGE", T::Gauge, S::Gpu, W::OnGpu, "Power draw (in W)."},
      {"DCGM_FI_DEV_GPU_TEMP", T::Gauge, S::Gpu, W::OnGpu, "GPU temperature (in C)."},
      {"DCGM_FI_DEV_SM_CLOCK", T::Gauge, S::Gpu, W::OnGpu, "SM clock frequency (in MHz)."},
  };
  return catalog;
}

const MetricDef& metric_def(const std::string& name) {
  for (const auto& d : metric_catalog())
    if (name == d.name) return d;
  throw Error(str("metric '", name, "' is not in the catalog (obs/metric_catalog.cpp)"));
}

const char* metric_type_name(MetricType type) { return type == MetricType::Counter ? "counter" : "gauge"; }

}  // namespace cadre::obs
