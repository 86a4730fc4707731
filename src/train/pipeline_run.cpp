// Setting up a run's pipeline stage (pipeline_run.h).
#include "train/pipeline_run.h"

#include <cstdlib>

#include "core/error.h"
#include "pipeline/simulation.h"
#include "rdzv/membership.h"

namespace cadre {

namespace {

// What the trainer's pipeline does not run yet, refused before any work starts.
void check_supported(const Config& c, pipeline::Schedule schedule) {
  CADRE_CONFIG_CHECK(schedule != pipeline::Schedule::Interleaved, "parallel.pp_schedule interleaved: a training ",
                     "run's stages hold one contiguous run of blocks each; use gpipe or 1f1b");
  CADRE_CONFIG_CHECK(c.lora.dropout == 0, "lora.dropout ", c.lora.dropout,
                     ": LoRA dropout under pipeline stages is not supported yet (set 0 with parallel.pp_size > 1)");
  CADRE_CONFIG_CHECK(!std::getenv(rdzv::kMembershipFdEnv), "parallel.pp_size ", c.parallel.pp_size,
                     ": `cadre run --recovery memory` does not re-form pipeline stages yet (use --recovery restart)");
}

}  // namespace

StageActivations PipelineRun::activations() const {
  const int64_t stages = int64_t(bounds.size()) - 1;
  const pipeline::Simulation paper = pipeline::simulate(schedule, {stages, micro_batches, 1});
  return {batch_parts, paper.peak_in_flight[size_t(stage_index)]};
}

std::string PipelineRun::describe() const {
  const int64_t stages = int64_t(bounds.size()) - 1, s = stage_index;
  std::string parts = str("blocks [", stage.begin, ", ", stage.end, ")");
  if (stage.first) parts = "embedding + " + parts;
  if (stage.last) parts += " + head and loss";
  return str("pipeline stage ", s, " of ", stages, ": ", parts, "; ", pipeline::schedule_name(schedule), " over ",
             micro_batches, " micro-batches");
}

std::unique_ptr<PipelineRun> pipeline_keep_stage(const Config& c, Model& model, int64_t pp_rank) {
  const ParallelConfig& p = c.parallel;
  if (p.pp_size == 1) return nullptr;
  auto run = std::make_unique<PipelineRun>();
  run->schedule = pipeline::parse_schedule(p.pp_schedule);
  run->micro_batches = p.pp_microbatches > 0 ? p.pp_microbatches : c.optim.grad_accum_steps;
  run->batch_parts = c.optim.grad_accum_steps / run->micro_batches;
  run->stage_index = pp_rank;
  run->activation_dtype = p.mixed_precision.param_dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  check_supported(c, run->schedule);
  pipeline::check_shape(run->schedule, {p.pp_size, run->micro_batches, 1});
  const std::optional<PipelineTrunk> trunk = model.pipeline_trunk();
  CADRE_CONFIG_CHECK(trunk.has_value(), "parallel.pp_size ", p.pp_size, ": ", model.describe(),
                     " cannot be split into pipeline stages");
  const int64_t blocks = int64_t(trunk->block_params.size());
  run->bounds = p.pp_split.empty() ? pipeline::balanced_split(trunk->block_params, p.pp_size, trunk->before, trunk->after)
                                   : pipeline::split_from_list(p.pp_split, blocks, p.pp_size);
  run->stage = {run->bounds[size_t(pp_rank)], run->bounds[size_t(pp_rank + 1)], pp_rank == 0, pp_rank == p.pp_size - 1};
  for (const auto& item : model.module().named_parameters()) run->held_elsewhere.insert(item.key());
  model.keep_pipeline_stage(run->stage);
  for (const auto& item : model.module().named_parameters()) run->held_elsewhere.erase(item.key());
  return run;
}

LossOutput pipeline_forward_loss(PipelineRun& run, Model& model, const Batch& batch) {
  at::Tensor input;
  if (!run.stage.first) {
    const std::vector<int64_t> sizes = model.stage_activation_sizes(batch.input.size(0), batch.input.size(1));
    input = at::empty(sizes, batch.input.options().dtype(run.activation_dtype));
    run.links->receive_activation(input).wait();
  }
  const at::Tensor output = model.stage_forward(batch, input);
  if (run.stage.last) return model.stage_loss(output, batch);
  const at::Tensor sent = output.contiguous();
  run.links->send_activation(sent).wait();
  return {};
}

void pipeline_connect(PipelineRun& run, const DeviceMesh& mesh) {
  CADRE_CHECK(mesh.pp(), "pipeline: a ", run.bounds.size() - 1, "-stage pipeline on a mesh without a pp dimension");
  run.links = std::make_unique<pipeline::Links>(*mesh.pp(), /*wrap=*/false);
}

}  // namespace cadre
