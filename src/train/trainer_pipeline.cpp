// One training step through a pipeline stage (parallel.pp_size > 1): every stage reads the
// step's data micro-batches (the first takes their inputs, the last their targets, all their
// packed documents), joins them into the pipeline's micro-batches, and runs them in the
// schedule's order (pipeline/executor.h). The last stage computes the loss, weighted as one
// rank accumulating the same micro-batches would weight it; gradients accumulate in the
// stage's FSDP units as in any accumulation, reduced across data-parallel ranks in every
// backward (sharded strategies) or in the step's last (whole gradients).
#include <ATen/ATen.h>

#include "models/lora_dropout.h"
#include "pipeline/executor.h"
#include "pipeline/stage_error.h"
#include "train/trainer_impl.h"

namespace cadre::detail {
namespace {

// `parts` data micro-batches side by side: one pipeline micro-batch.
Batch join(std::vector<Batch>& parts) {
  if (parts.size() == 1) return std::move(parts[0]);
  std::vector<at::Tensor> inputs, targets;
  std::vector<std::vector<int64_t>> documents;
  for (Batch& b : parts) {
    inputs.push_back(b.input);
    targets.push_back(b.target);
    documents.insert(documents.end(), b.documents.begin(), b.documents.end());
  }
  at::Tensor input = at::cat(inputs);
  CADRE_CHECK(documents.empty() || int64_t(documents.size()) == input.size(0),
              "pipeline: some micro-batches of a step carry packed documents and others do not");
  return Batch(std::move(input), at::cat(targets), std::move(documents));
}

}  // namespace

StepFigures Trainer::forward_backward_pipeline(int64_t step) {
  PipelineRun& pp = *run_->pipeline;
  const int64_t B = c_.data.batch_size, accum = c_.optim.grad_accum_steps, m = pp.micro_batches, per = accum / m;
  run_->sharded.zero_grad();
  std::vector<Batch> batches;
  for (int64_t i = 0; i < m; ++i) {
    std::vector<Batch> parts;
    for (int64_t j = 0; j < per; ++j)
      parts.push_back(timer_.data([&] {
        return run_->train_data->next(static_cast<uint64_t>(B * run_->dp), static_cast<uint64_t>(run_->dp_rank * B),
                                      static_cast<uint64_t>(B));
      }));
    batches.push_back(join(parts));
  }
  // A micro-batch's mean loss counts for 1 / m of the step's (each holds the same samples), or
  // for a labelled step its share of the learned targets (micro_batch_weights).
  const bool labelled = run_->train_data->labelled();
  const std::vector<double> weights =
      labelled ? micro_batch_weights(batches) : std::vector<double>(size_t(m), 1.0 / double(m));
  // measure() divides by grad_accum_steps; agree_across_ranks averages over every rank, and
  // only the last stage's ranks (one in pp_size) hold a loss.
  const double loss_scale = double(accum) * double(pp.stages());
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(run_->device));

  // LoRA dropout draws pipeline micro-batch i's masks as one rank draws its data micro-batches
  // i * per ... i * per + per - 1 (models/lora_dropout.h), in its forward and again in its
  // backward (activation checkpointing's recomputation): other micro-batches run in between.
  DropoutDrawScope draws;
  auto draw_for = [&](int64_t micro) {
    draws.set({static_cast<uint64_t>(c_.train.seed), static_cast<uint64_t>(step), (micro * per * run_->dp + run_->dp_rank) * B,
               B, B * run_->dp});
  };
  pipeline::StageWork work;
  work.forward = [&](int64_t chunk, int64_t micro, const at::Tensor& input) {
    draw_for(micro);
    const Batch& batch = batches[size_t(micro)];
    at::Tensor out = run_->model->stage_forward(batch, input, chunk);
    if (!pp.computes_loss(chunk)) return out;
    const at::Tensor loss = run_->model->stage_loss(out, batch).loss;
    const double w = weights[size_t(micro)];
    if (w > 0) loss_sum += loss.detach().to(at::kDouble) * (w * loss_scale);
    return loss * w;
  };
  // Whole gradients are reduced across the data-parallel ranks only in the stage's last
  // backward of the step: chunk 0's last (every schedule ends with it). Under interleaved that
  // backward runs through chunk 0 alone, and FSDP reduces what the other chunks' units
  // accumulated at its end (FullyShardOptions::partial_backward).
  std::optional<FSDPModule::NoSyncGuard> accumulate;
  const bool whole = accumulates_whole_gradients(c_.parallel);
  work.before_backward = [&](int64_t chunk, int64_t micro, bool last_of_chunk) {
    draw_for(micro);
    const bool last_of_step = chunk == 0 && last_of_chunk;
    if (whole && !last_of_step && !accumulate) accumulate.emplace(&run_->sharded.tree());
    if (last_of_step) accumulate.reset();
  };
  pipeline::StepShape shape;
  shape.schedule = pp.schedule;
  shape.shape = {pp.stages(), m, pp.chunks};
  shape.activation_sizes = run_->model->stage_activation_sizes(B * per, run_->train_data->sample_len());
  shape.activation_dtype = pp.activation_dtype;
  shape.device = run_->device;
  const pipeline::StepFigures figures = pipeline::run_step(work, *pp.links, shape);
  pipeline_sum_tied_gradients(pp, run_->sharded, step);

  StepFigures f;
  f.loss_sum = loss_sum.item<double>();
  f.correct = -1;
  // Every stage's split, for metrics.jsonl: one small sum over the stages.
  const int64_t stages = pp.links->stages(), s = pp.links->stage();
  at::Tensor split = at::zeros({2 * stages}, at::kFloat);
  split[s] = figures.compute_s;
  split[stages + s] = figures.wait_s;
  pipeline::rethrow_in_context([&] { run_->mesh->pp()->all_reduce(split, comm::ReduceOp::Sum); },
                               [&] { return str("pipeline stage ", s, ": summing the stages' compute and wait times of step ", step); });
  for (int64_t i = 0; i < stages; ++i) {
    f.stage_compute_s.push_back(split[i].item<double>());
    f.stage_wait_s.push_back(split[stages + i].item<double>());
  }
  return f;
}

}  // namespace cadre::detail
