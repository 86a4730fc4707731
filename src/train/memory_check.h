// The memory estimate for a run's config and model (memory_estimate.h), and the check a run
// makes with it before allocating its shards: rank 0 prints the estimate, every rank checks
// its limits (memory_fit.h), and all stop together (exit 2) if any rank would not fit.
#pragma once

#include "core/config.h"
#include "models/model.h"
#include "train/memory_fit.h"

namespace cadre {

struct RunSetup;

// The estimate's inputs for a run of `c` on `dp` data-parallel ranks: its compute dtype,
// optimizer, accumulation, prefetch and periodic checkpoints, and the model's activations at
// data.batch_size samples of the dataset's sequence length (the model's max_seq_len when no
// data.dir is given). `pipeline`: a pipeline stage's micro-batches (pp_microbatches' share of the
// batch each) and how many of them it holds at once (PipelineRun::activations).
struct StageActivations {
  int64_t batch_parts = 1, in_flight = 1;
};
EstimateInputs estimate_inputs(const Config& c, const Model& model, ShardPlan plan, bool cpu, int64_t dp,
                               StageActivations pipeline = {});

// Collective over the job. Throws ConfigError on every rank when one would not fit.
FitCheck check_run_memory(RunSetup& r);

}  // namespace cadre
