// Runs one training step's micro-batches through this rank's pipeline stage in the order a
// schedule gives (schedule.h): forwards keep their inputs and outputs until their backward,
// activations and gradients cross to the neighbours over Links, receives are posted ahead and
// sends waited for only at the end of the step. Gradients accumulate in the parameters' .grad
// in micro-batch order, as one process running the micro-batches one after another would.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "pipeline/links.h"
#include "pipeline/schedule.h"

namespace cadre::pipeline {

// What this rank computes. forward(chunk, micro, input): the chunk's output for micro-batch
// `micro`. On virtual stage 0 `input` is undefined (the stage reads its own data); on the last
// virtual stage the output is the scalar loss the backward starts from (weighted as the caller
// wants the micro-batches summed).
struct StageWork {
  std::function<at::Tensor(int64_t chunk, int64_t micro, const at::Tensor& input)> forward;
  // Optional: called right before each backward (of micro-batch `micro` through `chunk`), with
  // whether it is the step's last backward through `chunk` on this stage (where data-parallel
  // gradient reductions belong).
  std::function<void(int64_t chunk, int64_t micro, bool last_of_chunk)> before_backward;
};

struct StepShape {
  Schedule schedule = Schedule::OneFOneB;
  PipelineShape shape;
  // The activation crossing between stages, the same for every micro-batch (a [batch, seq, dim]
  // hidden state): receive buffers are made with it.
  std::vector<int64_t> activation_sizes;
  at::ScalarType activation_dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);  // where the stage computes: receive buffers are made there
};

struct StepFigures {
  double compute_s = 0;  // forwards and backwards
  double wait_s = 0;     // waiting on a neighbour (the bubble and transfers not hidden)
};

// Collective over the pipeline (every stage calls it with the same StepShape). Error naming the
// stage and action when a transfer fails or a stage's output is not what its neighbour expects.
StepFigures run_step(const StageWork& work, Links& links, const StepShape& step);

}  // namespace cadre::pipeline
