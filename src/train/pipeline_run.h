// Pipeline parallelism in a training run (parallel.pp_size > 1): the schedule and the split the
// config asks for, checked before any work starts; this rank's stage kept (the rest of the model
// dropped while it is still shapes only, so a stage allocates only its own blocks); and the
// links to the neighbouring stages, once the mesh exists. One step's micro-batches run through
// them in Trainer::forward_backward_pipeline (trainer_pipeline.cpp).
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

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
  int64_t chunks = 1;            // per stage (virtual stages: pp_size x chunks; > 1 under interleaved)
  pipeline::StageBounds bounds;  // blocks of every virtual stage
  PipelineStage stage;           // this rank's
  int64_t micro_batches = 1;     // per step
  int64_t batch_parts = 1;       // data micro-batches (data.batch_size samples) in each
  at::ScalarType activation_dtype = at::kFloat;  // what crosses between stages: the compute dtype
  std::set<std::string> held_elsewhere;  // the model's parameters the other stages hold
  // Parameters the first and the last stage both hold (PipelineTrunk::tied), on those two
  // stages; `mirrored`: those of them the last stage holds as the first stage's copy.
  std::vector<std::string> tied;
  std::set<std::string> mirrored;
  comm::Communicator* tied_group = nullptr;  // the first and the last stage (ranks 0 and 1)
  std::unique_ptr<comm::Communicator> own_tied_group;  // it, where it is not the pp group itself
  std::unique_ptr<pipeline::Links> links;
  int64_t stage_index = 0;  // this rank's stage, 0 .. pp_size - 1
  // "pipeline stage 1 of 2: blocks [4, 8) + head and loss; 1f1b over 8 micro-batches" for the log
  // ("blocks [2, 4) and [6, 8)" for a stage of two chunks).
  std::string describe() const;
  // The stage's micro-batches for the memory estimate: data micro-batches joined into one, and
  // the most whose activations it holds at once (the schedule's, run on paper: GPipe all m,
  // 1F1B p - stage; interleaved, in whole stages' worth: its chunk forwards held / chunks).
  StageActivations activations() const;
  int64_t stages() const { return (int64_t(bounds.size()) - 1) / chunks; }
  // Whether `chunk` of this stage is the pipeline's last virtual stage (it computes the loss).
  bool computes_loss(int64_t chunk) const { return stage.last && chunk == chunks - 1; }
};

// Null for pp_size 1. ConfigError naming the parallel.pp_* (or other) key when the run cannot
// be split as asked: a model without stages, too few blocks, a bad split, schedule or chunk
// count. Keeps the stage of `pp_rank` (its chunks) in `model`.
std::unique_ptr<PipelineRun> pipeline_keep_stage(const Config& c, Model& model, int64_t pp_rank);

// The step's pipeline micro-batches for `grad_accum_steps` data micro-batches a rank
// (parallel.pp_microbatches, or one each): set at the start, and again when in-memory recovery
// changes the accumulation to keep the global batch. ConfigError when they do not divide it or
// the schedule cannot run them.
void pipeline_set_accumulation(PipelineRun& run, const ParallelConfig& p, int64_t grad_accum_steps);

// Collective over the mesh's pp dimension: the links between neighbouring stages, and the
// group of the first and the last stage where they hold tied parameters.
void pipeline_connect(PipelineRun& run, const DeviceMesh& mesh);

// After a step's backward, on the first and the last stage: each tied parameter's gradient
// becomes the sum of the two stages' (collective over them), so the embedding learns from the
// tokens it looked up and from the head as one stage holding both would, and both copies take
// the same optimizer step. Nothing on other stages, or when the tied parameters are frozen.
void pipeline_sum_tied_gradients(PipelineRun& run, FSDPModule& model, int64_t step);

// One batch's forward through the pipeline, without a backward (evaluation): each of this
// stage's chunks in turn, its input received from the previous virtual stage and its output
// sent to the next, each transfer waited for. The loss on the last stage; undefined on the
// others. Collective over the pp group.
LossOutput pipeline_forward_loss(PipelineRun& run, Model& model, const Batch& batch);

}  // namespace cadre
