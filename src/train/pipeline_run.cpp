// Setting up a run's pipeline stage (pipeline_run.h).
#include "train/pipeline_run.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "pipeline/simulation.h"
#include "pipeline/stage_error.h"

namespace cadre {

namespace {

// parallel.pp_chunks, or the schedule's default: 2 chunks a stage under interleaved, else 1.
int64_t chunks_per_stage(const ParallelConfig& p, pipeline::Schedule schedule) {
  if (p.pp_chunks > 0) return p.pp_chunks;
  return schedule == pipeline::Schedule::Interleaved ? 2 : 1;
}

}  // namespace

StageActivations PipelineRun::activations() const {
  const pipeline::Simulation paper = pipeline::simulate(schedule, {stages(), micro_batches, chunks});
  // A chunk's forward keeps 1 / chunks of the stage's blocks' activations.
  const int64_t held = paper.peak_in_flight[size_t(stage_index)];
  return {batch_parts, (held + chunks - 1) / chunks};
}

std::string PipelineRun::describe() const {
  std::string parts;
  for (const PipelineStage::Blocks& b : stage.chunks)
    parts += str(parts.empty() ? "blocks " : " and ", "[", b.begin, ", ", b.end, ")");
  if (stage.first) parts = "embedding + " + parts;
  if (stage.last) parts += " + head and loss";
  return str("pipeline stage ", stage_index, " of ", stages(), ": ", parts, "; ", pipeline::schedule_name(schedule),
             chunks > 1 ? str(" (", chunks, " chunks a stage)") : std::string(), " over ", micro_batches,
             " micro-batches");
}

std::unique_ptr<PipelineRun> pipeline_keep_stage(const Config& c, Model& model, int64_t pp_rank) {
  const ParallelConfig& p = c.parallel;
  if (p.pp_size == 1) return nullptr;
  auto run = std::make_unique<PipelineRun>();
  run->schedule = pipeline::parse_schedule(p.pp_schedule);
  run->chunks = chunks_per_stage(p, run->schedule);
  run->stage_index = pp_rank;
  run->activation_dtype = p.mixed_precision.param_dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  pipeline_set_accumulation(*run, p, c.optim.grad_accum_steps);
  const std::optional<PipelineTrunk> trunk = model.pipeline_trunk();
  CADRE_CONFIG_CHECK(trunk.has_value(), "parallel.pp_size ", p.pp_size, ": ", model.describe(),
                     " cannot be split into pipeline stages");
  const int64_t blocks = int64_t(trunk->block_params.size()), virtual_stages = p.pp_size * run->chunks;
  CADRE_CONFIG_CHECK(run->chunks == 1 || blocks >= virtual_stages, "parallel.pp_size ", p.pp_size,
                     " x parallel.pp_chunks ", run->chunks, ": ", virtual_stages, " virtual stages need a block each; ",
                     model.describe(), " has ", blocks);
  run->bounds = p.pp_split.empty()
                    ? pipeline::balanced_split(trunk->block_params, virtual_stages, trunk->before, trunk->after)
                    : pipeline::split_from_list(p.pp_split, blocks, virtual_stages);
  // Chunk k of stage s is virtual stage k * pp_size + s.
  for (int64_t k = 0; k < run->chunks; ++k) {
    const size_t g = size_t(k * p.pp_size + pp_rank);
    run->stage.chunks.push_back({run->bounds[g], run->bounds[g + 1]});
  }
  run->stage.first = pp_rank == 0;
  run->stage.last = pp_rank == p.pp_size - 1;
  if (run->stage.first || run->stage.last) run->tied = trunk->tied;
  if (!run->stage.first) run->mirrored.insert(run->tied.begin(), run->tied.end());
  for (const auto& item : model.module().named_parameters()) run->held_elsewhere.insert(item.key());
  model.keep_pipeline_stage(run->stage);
  for (const auto& item : model.module().named_parameters()) run->held_elsewhere.erase(item.key());
  return run;
}

void pipeline_set_accumulation(PipelineRun& run, const ParallelConfig& p, int64_t grad_accum_steps) {
  run.micro_batches = p.pp_microbatches > 0 ? p.pp_microbatches : grad_accum_steps;
  CADRE_CONFIG_CHECK(grad_accum_steps % run.micro_batches == 0, "parallel.pp_microbatches ", run.micro_batches,
                     " does not divide optim.grad_accum_steps ", grad_accum_steps);
  run.batch_parts = grad_accum_steps / run.micro_batches;
  pipeline::check_shape(run.schedule, {p.pp_size, run.micro_batches, run.chunks});
}

LossOutput pipeline_forward_loss(PipelineRun& run, Model& model, const Batch& batch) {
  const int64_t s = run.stage_index, p = run.stages();
  // A failed transfer names this stage and its neighbour, as a training step's do.
  auto transfer = [&](const char* what, int64_t neighbour, const std::function<comm::Work()>& op) {
    pipeline::rethrow_in_context([&] { op().wait(); },
                                 [&] { return str("pipeline stage ", s, " (validation): ", what, " stage ", neighbour); });
  };
  const std::vector<int64_t> sizes = model.stage_activation_sizes(batch.input.size(0), batch.input.size(1));
  for (int64_t chunk = 0; chunk < run.chunks; ++chunk) {
    at::Tensor input;
    if (chunk > 0 || !run.stage.first) {
      input = at::empty(sizes, batch.input.options().dtype(run.activation_dtype));
      transfer("receiving the activation from", (s + p - 1) % p, [&] { return run.links->receive_activation(input); });
    }
    const at::Tensor output = model.stage_forward(batch, input, chunk);
    if (run.computes_loss(chunk)) return model.stage_loss(output, batch);
    const at::Tensor sent = output.contiguous();
    transfer("sending the activation to", (s + 1) % p, [&] { return run.links->send_activation(sent); });
  }
  return {};
}

void pipeline_connect(PipelineRun& run, const DeviceMesh& mesh) {
  CADRE_CHECK(mesh.pp(), "pipeline: a ", run.stages(), "-stage pipeline on a mesh without a pp dimension");
  // Interleaved chunks: the last stage's chunk k feeds the first stage's chunk k + 1.
  run.links = std::make_unique<pipeline::Links>(*mesh.pp(), /*wrap=*/run.chunks > 1);
  if (run.tied.empty()) return;
  comm::Communicator& stages = *mesh.pp();
  if (stages.size() == 2) {
    run.tied_group = &stages;
    return;
  }
  run.own_tied_group = stages.subgroup({0, stages.size() - 1}, "ends");
  run.tied_group = run.own_tied_group.get();
}

void pipeline_sum_tied_gradients(PipelineRun& run, FSDPModule& model, int64_t step) {
  if (!run.tied_group) return;
  // The two stages' shards of a tied parameter sit alike (the model gives it a unit of the same
  // layout on both), so this rank's pieces add to its counterpart's element for element.
  std::vector<at::Tensor> grads;
  for (size_t k = 0; k < model.piece_layout().size(); ++k) {
    const std::string& name = model.piece_layout()[k].name;
    if (std::find(run.tied.begin(), run.tied.end(), name) != run.tied.end()) grads.push_back(model.parameters()[k].grad());
  }
  if (grads.empty()) return;  // frozen (or outside this rank's shard): the same on the other stage
  std::vector<at::Tensor> flat;
  for (const at::Tensor& g : grads) flat.push_back(g.reshape({-1}));
  at::Tensor sum = at::cat(flat);
  const int64_t s = run.stage_index, other = run.stage.first ? run.stages() - 1 : 0;
  pipeline::rethrow_in_context([&] { run.tied_group->all_reduce(sum, comm::ReduceOp::Sum); },
                               [&] {
                                 return str("pipeline stage ", s, ": summing the tied parameters' gradients with stage ",
                                            other, " in step ", step + 1);
                               });
  int64_t at = 0;
  for (at::Tensor& g : grads) {
    g.view({-1}).copy_(sum.narrow(0, at, g.numel()));
    at += g.numel();
  }
}

}  // namespace cadre
