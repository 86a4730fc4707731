// What a run writes about itself besides checkpoints: metrics.jsonl kept consistent with a
// resume, and at the end the memory report and <run.dir>/summary.json.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "shard/memory_report.h"
#include "train/resume.h"
#include "train/run_setup.h"
#include "train/trainer.h"

namespace cadre {

// After a resume, metrics.jsonl keeps the records up to the resumed step: steps the crashed
// run did after its last checkpoint are done again and logged again. Returns the newest step
// kept (0 for none).
int64_t metrics_truncate(const std::string& path, int64_t step);

// This rank's model state after training: measured, with the optimizer's moments, against the
// strategy's formula.
MemoryReport final_memory_report(RunSetup& run);

// What summary.json records of a finished run (rank 0 writes it).
struct RunOutcome {
  const TrainSummary& summary;
  const Resumed& resumed;
  const std::string& initialised_from;
  const MemoryReport& memory;
  std::optional<bool> identical;  // train.check_replicas' verdict, when asked for
};
void summary_write(RunSetup& run, const RunOutcome& outcome);

}  // namespace cadre
