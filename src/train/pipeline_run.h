// Pipeline parallelism in a training run (parallel.pp_size > 1): the schedule and the split the
// config asks for, checked before any work starts; this rank's stage kept (the rest of the model
// dropped while it is still shapes only, so a stage allocates only its own blocks); and the
// links to the neighbouring stages, once the mesh exists. One step's micro-batches run through
// them in Trainer::forward_backward_pipeline (trainer_pipeline.cpp).
#pragma once

#include <memory>
#include <set>
#include <string>

#include "core/config.h"
#include "models/model.h"
#include "pipeline/links.h"
#include "pipeline/schedule.h"
#include "pipeline/stage_split.h"
#include "shard/device_mesh.h"
#include "train/memory_check.h"

namespace cadre {

struct PipelineRun {
  pipeline::Schedule schedule = pipeline::Schedule::OneFOneB;
  pipeline::StageBounds bounds;  // blocks of every stage
  PipelineStage stage;           // this rank's
  int64_t micro_batches = 1;     // per step
  int64_t batch_parts = 1;       // data micro-batches (data.batch_size samples) in each
  at::ScalarType activation_dtype = at::kFloat;  // what crosses between stages: the compute dtype
  std::set<std::string> held_elsewhere;  // the model's parameters the other stages hold
  std::unique_ptr<pipeline::Links> links;
  int64_t stage_index = 0;  // this rank's stage, 0 .. pp_size - 1
  // "pipeline stage 1 of 2: blocks [4, 8) + head and loss; 1f1b over 8 micro-batches" for the log.
  std::string describe() const;
  // The stage's micro-batches for the memory estimate: data micro-batches joined into one, and
  // the most whose activations it holds at once (the schedule's, run on paper: GPipe all m,
  // 1F1B p - stage).
  StageActivations activations() const;
};

// Null for pp_size 1. ConfigError naming the parallel.pp_* (or other) key when the run cannot
// be split as asked: a model without stages, too few blocks, a bad split or schedule, or what
// the pipeline does not run yet (interleaved stages in a training run, LoRA dropout, in-memory
// recovery). Keeps the stage of `pp_rank` in `model`.
std::unique_ptr<PipelineRun> pipeline_keep_stage(const Config& c, Model& model, int64_t pp_rank);

// Collective over the mesh's pp dimension: the links between neighbouring stages.
void pipeline_connect(PipelineRun& run, const DeviceMesh& mesh);

// One batch's forward through the pipeline, without a backward (evaluation): this stage's part,
// its input received from the previous stage and its output sent to the next, each transfer
// waited for. The loss on the last stage; undefined on the others. Collective over the pp group.
LossOutput pipeline_forward_loss(PipelineRun& run, Model& model, const Batch& batch);

}  // namespace cadre
