// metrics.jsonl after a resume, the memory report and summary.json (see run_records.h).
#include "train/run_records.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/file_util.h"
#include "core/strategy.h"
#include "core/sysinfo.h"

namespace cadre {

int64_t metrics_truncate(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return 0;
  std::string kept;
  int64_t newest = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const int64_t at = record.is_object() ? record.value("step", int64_t{0}) : 0;
    if (at > step) continue;
    newest = std::max(newest, at);
    kept += line + "\n";
  }
  file_write_atomic(path, kept);
  return newest;
}

MemoryReport final_memory_report(RunSetup& run) {
  const int64_t optimizer_bytes = run.optimizer->state_bytes();
  const ShardMemory measured = run.sharded.memory();
  const int64_t compute_bytes = at::elementSize(run.shard_options.mixed_precision.param_dtype);
  MemoryReport report = memory_report(measured, optimizer_bytes,
                                      state_formula(run.shard_options.strategy, measured, compute_bytes,
                                                    run.optimizer->state_bytes_per_param()));
  if (run.device.is_cuda()) {
    report.device = run.device.str();
    report.peak_device = device_peak_bytes(run.device);
  }
  return report;
}

void summary_write(RunSetup& run, const RunOutcome& o) {
  const TrainSummary& summary = o.summary;
  const std::string unit = run.model->throughput_unit();
  nlohmann::json s = {{"steps", summary.steps},
                      {"resumed_from", o.resumed.path},
                      {"resumed_step", o.resumed.step},
                      {"initialised_from", o.initialised_from},
                      {"checkpoint", summary.checkpoint},
                      {"world_size", run.world},
                      {"tp_size", run.mesh->tp_size()},
                      {"dp_size", run.dp},
                      {"pp_size", run.mesh->pp_size()},
                      {"final_loss", summary.final_loss},
                      {"final_val_loss", summary.final_val_loss},
                      {unit + "_per_s", summary.throughput},
                      {"params", run.model->param_count()},
                      {"arch", run.c.model.arch},
                      {"strategy", strategy_name(run.c.parallel.strategy)},
                      {"memory", o.memory.to_json()},
                      {"peak_rss_bytes", process_peak_rss_bytes()},
                      {"rss_bytes", process_rss_bytes()},  // at the end, every save written
                      {"device", device_describe(run.device)},
                      {"libtorch", libtorch_version()},
                      {"cuda", cuda_runtime_version()},
                      {"peak_device_bytes", device_peak_bytes(run.device)},
                      {"host_syncs_per_step", summary.host_syncs_per_step}};
  if (summary.final_val_accuracy >= 0) s["final_val_accuracy"] = summary.final_val_accuracy;
  if (o.identical) s["params_identical_across_ranks"] = *o.identical;
  if (run.pipeline) {  // rank 0's view: its schedule, and the blocks of every stage
    s["pp_schedule"] = pipeline::schedule_name(run.pipeline->schedule);
    s["pp_microbatches"] = run.pipeline->micro_batches;
    s["pp_bounds"] = run.pipeline->bounds;  // of every virtual stage
    s["pp_chunks"] = run.pipeline->chunks;
  }
  std::ofstream(run.c.run.dir + "/summary.json") << s.dump(2) << "\n";
}

}  // namespace cadre
