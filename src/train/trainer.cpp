// The training loop, top to bottom (train_run at the end of this file): set up the run
// (run_setup.cpp), resume from a checkpoint (trainer_checkpointing.cpp), then for each step run
// the micro-batches, agree across ranks, clip and update, evaluate, checkpoint (in the
// background) and report; at the end wait for the last save and write the summary
// (run_records.cpp). The Trainer's state is in trainer_impl.h.
#include "train/trainer.h"

#include "models/lora_dropout.h"
#include "train/trainer_impl.h"

namespace cadre {
namespace detail {

// --- before the first step ------------------------------------------------------------------

void Trainer::start_observing() {
  const int64_t B = c_.data.batch_size, accum = c_.optim.grad_accum_steps;
  const std::string unit = run_->model->throughput_unit();
  observer_ = std::make_unique<obs::TrainObserver>(obs::train_observer_options(
      c_, run_->rank, run_->world, unit, double(B * accum), double(B * accum * run_->train_data->sample_len())));
  int64_t shard_numel = 0, frozen_numel = 0;
  for (const auto& p : run_->sharded.parameters()) shard_numel += p.numel();
  for (const auto& p : run_->sharded.frozen_parameters()) frozen_numel += p.numel();
  const ShardMemory shard_memory = run_->sharded.memory();
  const int64_t optimizer_bytes = run_->optimizer->state_bytes_per_param() * shard_numel;
  observer_->set_model_state_bytes(shard_memory.params + shard_memory.frozen + shard_memory.grads + optimizer_bytes);
  // A resume reads the float32 masters (frozen ones too, unless a LoRA run's checkpoint left
  // its base out) and the optimizer's state.
  const int64_t frozen_read = base_fingerprint_ ? 0 : 4 * frozen_numel;
  observer_->started(resumed_.step, resumed_.path, resumed_.load_s,
                     resumed_.path.empty() ? 0 : 4 * shard_numel + frozen_read + optimizer_bytes);
  summary_.run_dir = c_.run.dir;
  summary_.lead = run_->lead;
  summary_.resumed_from = resumed_.path;
  summary_.throughput_unit = unit;
}

// E.g. a restart after the last checkpoint was written: done is done.
TrainSummary Trainer::nothing_to_train() {
  if (run_->lead) log::info(str("train: the run is already at step ", resumed_.step, "; nothing to train"));
  summary_.steps = resumed_.step;
  summary_.checkpoint = resumed_.path;
  summary_.nothing_to_train = true;
  if (run_->group) run_->group->barrier();
  return summary_;
}

void Trainer::start() {
  samples_per_step_ = c_.data.batch_size * c_.optim.grad_accum_steps * run_->dp;
  units_per_step_ = samples_per_step_ * run_->train_data->sample_len();
  unit_ = run_->model->throughput_unit();
  log::info(str("train: ", run_->model->describe(), " on ", device_describe(run_->device), ", ",
                strategy_name(c_.parallel.strategy), ", compute ",
                c_.parallel.mixed_precision.param_dtype, ", ", run_->world, " rank(s) (", run_->mesh->describe(),
                ") x ", c_.train.threads, " threads; ", run_->train_data->num_samples(), " train samples; ",
                units_per_step_, " ", unit_, " per step"));
  if (run_->lead && c_.optim.grad_accum_steps > 1 && c_.parallel.accumulate_unsharded &&
      strategy_shards_parameters(c_.parallel.strategy)) {
    int64_t whole = 0;
    for (const auto& f : run_->sharded.flat_params()) whole += f->padded * 4;  // float32 sums of each unit's gradient
    log::info(str("train: parallel.accumulate_unsharded keeps every unit's whole gradient across the ",
                  c_.optim.grad_accum_steps, " micro-batches: +", double(whole) / (1 << 20), " MiB per rank"));
  }
  if (run_->lead) {
    const int64_t logged = resumed_.step > 0 ? metrics_truncate(c_.run.dir + "/metrics.jsonl", resumed_.step) : 0;
    metrics_ = std::make_unique<JsonLog>(c_.run.dir + "/metrics.jsonl", /*append=*/resumed_.step > 0);
    // A re-formed group took over a step whose record the old rank 0 never wrote (it stopped or
    // died after the step's last collective): the record came with the state.
    if (logged < resumed_.step && !adopted_record_.empty()) {
      nlohmann::json record = nlohmann::json::parse(adopted_record_);
      if (record.value("step", int64_t{0}) == resumed_.step) metrics_->write(record);
    }
    progress_ = std::make_unique<Progress>("train: step", end_step_, "step", 0.5, resumed_.step);
  }
  stop_signal_.emplace();
  host_syncs_ = std::make_unique<HostSyncCounter>(run_->device);
  last_record_ = adopted_record_;  // carried on if the group re-forms before its first step
  if (peer_copies_) keep_copy(resumed_.step, adopted_record_);  // the group is covered from its first step
}

// --- one step -------------------------------------------------------------------------------

void Trainer::run_step(int64_t step) {
  const int64_t syncs_before = host_syncs_->count();
  timer_.start();
  StepFigures f = forward_backward(step);
  stopping_ = stop_signal_->received();
  reform_due_ = channel_ && channel_->pending();
  if (run_->group) agree_across_ranks(f, step);
  update(f, step);
  const int64_t done = step + 1;
  if (training_forward_next(done)) run_->sharded.prefetch_next_forward();  // behind the bookkeeping below
  steps_done_ = done;
  position_done_ = int64_t(run_->train_data->position());
  nlohmann::json record = measure(f, step);
  if (evaluation_due(done)) evaluate_into(record, done);
  if (checkpoint_due(done) || stopping_) stage_checkpoint(record, done);
  if (syncs_before >= 0) {
    const int64_t syncs = host_syncs_->count() - syncs_before;
    record["host_syncs"] = syncs;
    if (step > resumed_.step) syncs_per_step_.push_back(double(syncs));
  }
  if (peer_copies_ && done % c_.checkpoint.memory_interval == 0 && done != end_step_) {
    const auto t_copy = Clock::now();
    keep_copy(done, record.dump());
    record["peer_copy_s"] = std::chrono::duration<double>(Clock::now() - t_copy).count();
  }
  report(f, record, done);
  cpu_block_cache::trim_unused();  // memory this step did not reuse (a snapshot, an evaluation) is returned
}

// What each micro-batch's mean loss counts for in the gradient of a labelled step: the mean is
// over the learned targets of the whole step, on every rank (transformers'
// num_items_in_batch), so a micro-batch counts for its share of them, times dp as the
// gradients' reduction averages over the data-parallel ranks; one with no learned target
// counts for nothing (its mean loss is NaN, its gradient zero). Counting reads the targets on
// the host: one synchronisation per micro-batch on a GPU.
std::vector<double> Trainer::micro_batch_weights(const std::vector<Batch>& batches) {
  std::vector<double> weights(batches.size(), 0.0);
  std::vector<int64_t> learned;
  at::Tensor total = at::zeros({1}, at::kFloat);  // the communicator reduces float32: exact to 2^24
  for (const Batch& b : batches) {
    learned.push_back(learned_targets(b));
    total[0] += double(learned.back());
  }
  if (run_->group) run_->group->all_reduce(total, comm::ReduceOp::Sum);
  // Tensor-parallel ranks and pipeline stages count the same batches.
  const double step_learned = double(total[0].item<float>()) / double(run_->world / run_->dp);
  for (size_t i = 0; i < batches.size(); ++i)
    weights[i] = learned[i] > 0 ? double(learned[i]) * double(run_->dp) / step_learned : 0.0;
  return weights;
}

StepFigures Trainer::forward_backward(int64_t step) {
  if (run_->pipeline) return forward_backward_pipeline(step);
  const int64_t B = c_.data.batch_size, accum = c_.optim.grad_accum_steps;
  run_->sharded.zero_grad();
  StepFigures f;
  // Each data-parallel rank takes its slice of the global micro-batch (tensor-parallel ranks
  // the same one); together they read what one rank with dp * B samples would. Labelled data
  // reads the whole step first: its weights need every micro-batch's count.
  const bool labelled = run_->train_data->labelled();
  auto read_micro_batch = [&] {
    return timer_.data([&] {
      return run_->train_data->next(static_cast<uint64_t>(B * run_->dp), static_cast<uint64_t>(run_->dp_rank * B),
                                    static_cast<uint64_t>(B));
    });
  };
  std::vector<Batch> batches;
  for (int64_t micro = 0; micro < (labelled ? accum : 0); ++micro) batches.push_back(read_micro_batch());
  const std::vector<double> weights = labelled ? micro_batch_weights(batches) : std::vector<double>();
  // Summed where the loss lives, in float64 as on the host, and read once per step: on a GPU
  // one host synchronisation instead of one per micro-batch.
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(run_->device));
  at::Tensor correct_sum;  // stays undefined unless the model classifies
  DropoutDrawScope draws;
  for (int64_t micro = 0; micro < accum; ++micro) {
    Batch batch = labelled ? std::move(batches[micro]) : read_micro_batch();
    draws.set({static_cast<uint64_t>(c_.train.seed), static_cast<uint64_t>(step), (micro * run_->dp + run_->dp_rank) * B});
    // Whole gradients (NO_SHARD, ZERO1, or parallel.accumulate_unsharded) are reduced across
    // ranks only in the last micro-batch's backward; sharded ones in every backward.
    std::optional<FSDPModule::NoSyncGuard> accumulate;
    if (micro + 1 < accum && accumulates_whole_gradients(c_.parallel)) accumulate.emplace(&run_->sharded.tree());
    LossOutput out = run_->model->loss(batch);
    if (!labelled) {
      (out.loss / double(accum)).backward();
      loss_sum += out.loss.detach().to(at::kDouble);
    } else {
      // Every rank runs every backward (sharded gradients are reduced in it), learned or not.
      (out.loss * weights[micro]).backward();
      // Scaled so that the mean over ranks and micro-batches (agree_across_ranks, measure) is
      // the step's mean over its learned targets.
      if (weights[micro] > 0) loss_sum += out.loss.detach().to(at::kDouble) * (weights[micro] * double(accum));
    }
    if (out.correct.defined()) correct_sum = correct_sum.defined() ? correct_sum + out.correct : out.correct;
  }
  if (!correct_sum.defined()) {
    f.loss_sum = loss_sum.item<double>();
    f.correct = -1;  // no accuracy to report
    return f;
  }
  const at::Tensor both = at::stack({loss_sum, correct_sum.to(at::kDouble)}).to(at::kCPU);  // one read
  f.loss_sum = both[0].item<double>();
  f.correct = both[1].item<double>();
  return f;
}

// The loss, for the log, is the mean over ranks (tensor-parallel ranks hold the same one); a
// stop signal on any rank rides along, so all ranks stop after the same step at no extra cost,
// and so do a new membership one rank's agent announced (in-memory recovery: all re-form after
// the same step) and every rank's compute and wait times so far (straggler attribution).
void Trainer::agree_across_ranks(StepFigures& f, int64_t step) {
  constexpr int64_t kFixed = 5;
  at::Tensor l = at::empty({kFixed + int64_t(observer_->gather_slots())}, at::kFloat);
  float* v = l.data_ptr<float>();
  v[0] = float(f.loss_sum);
  v[1] = float(stopping_);
  v[2] = float(f.correct);
  v[3] = reform_due_ ? 1.f : 0.f;
  const bool copying = peer_copies_ && peer_copies_->pending();
  v[4] = copying && !peer_copies_->exchanged() ? 0.f : 1.f;
  observer_->fill_slots(v + kFixed, timer_.split());
  run_->group->all_reduce(l, comm::ReduceOp::Sum);
  f.loss_sum = double(v[0] / float(run_->world));  // rounded as an averaging all-reduce rounds it
  if (v[1] > 0 && !stopping_) stopping_ = SIGTERM;  // another rank's
  f.correct = double(v[2]) / double(run_->mesh->tp_size());  // each tensor-parallel rank counted the same samples
  reform_due_ = v[3] > 0;
  if (copying && v[4] == float(run_->world)) {  // every rank's exchange completed
    peer_copies_->commit();
    inherited_copies_.clear();
  }
  observer_->read_slots(step + 1, v + kFixed);
}

void Trainer::update(StepFigures& f, int64_t step) {
  f.grad_norm = run_->sharded.clip_grad_norm(c_.optim.grad_clip);
  f.lr = run_->schedule.at(step);
  run_->optimizer->step(f.lr);
  run_->sharded.mark_updated();
}

// The step's time, loss and rate, checked and recorded (metrics.jsonl's record of the step).
nlohmann::json Trainer::measure(StepFigures& f, int64_t step) {
  f.split = timer_.split();
  const double step_s = f.split.total_s;
  f.loss = f.loss_sum / double(c_.optim.grad_accum_steps);
  CADRE_CHECK(std::isfinite(f.loss), "step ", step + 1, ": loss is ", f.loss, " (diverged; lower optim.lr?)");
  f.rate = units_per_step_ / step_s;
  if (step > resumed_.step) rates_.push_back(f.rate);
  nlohmann::json record = {{"step", step + 1},         {"loss", f.loss},        {"lr", f.lr},
                           {"grad_norm", f.grad_norm}, {unit_ + "_per_s", f.rate}, {"step_time_s", step_s},
                           {"rss_bytes", process_rss_bytes()}, {"peak_rss_bytes", process_peak_rss_bytes()}};
  if (f.correct >= 0) record["accuracy"] = f.correct / double(samples_per_step_);
  if (!f.stage_compute_s.empty()) {
    record["pp_stage_compute_s"] = f.stage_compute_s;
    record["pp_stage_wait_s"] = f.stage_wait_s;
  }
  summary_.final_loss = f.loss;
  return record;
}

// Whether the model's next forward is the next step's: not when the run ends or re-forms after
// this step, nor when an evaluation comes first (its forward reshards whatever was gathered).
bool Trainer::training_forward_next(int64_t done) const {
  return done < end_step_ && !stopping_ && !reform_due_ && !evaluation_due(done);
}

bool Trainer::evaluation_due(int64_t done) const {
  return run_->val_data && (done % c_.train.eval_interval == 0 || done == end_step_);
}

void Trainer::evaluate_into(nlohmann::json& record, int64_t done) {
  BatchLoss stage_loss;
  if (run_->pipeline)
    stage_loss = [this](const Batch& batch) { return pipeline_forward_loss(*run_->pipeline, *run_->model, batch); };
  Evaluation e = evaluate(*run_->model, *run_->val_data, c_, run_->dp_rank, run_->dp, run_->mesh->dp(), stage_loss,
                          run_->mesh->pp());
  record["val_loss"] = e.loss;
  observer_->validated(e.loss);
  summary_.final_val_loss = e.loss;
  if (e.accuracy >= 0) {
    record["val_accuracy"] = e.accuracy;
    summary_.final_val_accuracy = e.accuracy;
  }
  if (run_->lead)
    log::info(e.accuracy >= 0 ? str("train: step ", done, " val_loss ", e.loss, " val_accuracy ", e.accuracy)
                              : str("train: step ", done, " val_loss ", e.loss));
}

void Trainer::report(const StepFigures& f, nlohmann::json& record, int64_t done) {
  saver_->check();  // a failed background save stops training here, on every rank
  const SaveStats committed = saver_->last_stats();
  observer_->checkpoint_committed(committed.step, committed.bytes, committed.total_s);
  observer_->step_done(done, f.split, f.loss, f.grad_norm, f.lr, record);
  if (metrics_) metrics_->write(record);
  last_record_ = record.dump();
  // The progress line redraws at most twice a second; its numbers refresh every log_interval.
  if (done % c_.train.log_interval == 0 || done == 1) {
    char line[160];
    std::snprintf(line, sizeof line, "loss %.4f lr %.2e gnorm %.3f %.0f %s/s", f.loss, f.lr, f.grad_norm, f.rate,
                  unit_.c_str());
    progress_text_ = line;
  }
  if (progress_ && done != end_step_) progress_->update(done, progress_text_);
}

// --- the end --------------------------------------------------------------------------------

TrainSummary Trainer::finish() {
  {
    obs::ProgressHeartbeat busy;  // the last save may still be writing
    saver_->wait();
  }
  const SaveStats saved = saver_->last_stats();
  observer_->checkpoint_committed(saved.step, saved.bytes, saved.total_s);
  observer_->finished(stopping_ ? saved.step : end_step_, stopping_ ? str("stopped on signal ", stopping_) : "completed");
  return stopping_ ? stopped(saved) : completed(saved);
}

TrainSummary Trainer::stopped(const SaveStats& saved) {
  progress_.reset();  // clears the line; the log line below says where training stopped
  if (run_->lead)
    log::info(str("train: stopped after step ", saved.step, " on signal ", stopping_, "; checkpoint ",
                  checkpoint_path(saved.step), " holds it (resume with --resume auto)"));
  summary_.steps = saved.step;
  summary_.checkpoint = checkpoint_path(saved.step);
  summary_.stopped_by_signal = stopping_;
  if (run_->group) run_->group->barrier();  // rank 0 hosts the store: leave together
  return summary_;
}

TrainSummary Trainer::completed(const SaveStats& saved) {
  if (run_->lead && saved.step > 0)
    log::info(str("checkpoint: step ", saved.step, " saved in ", checkpoint_path(saved.step), " (", saved.bytes / 1e6,
                  " MB from this rank, written in ", saved.write_s, " s)"));
  std::sort(rates_.begin(), rates_.end());
  summary_.throughput = rates_.empty() ? 0 : rates_[rates_.size() / 2];
  std::sort(syncs_per_step_.begin(), syncs_per_step_.end());
  if (!syncs_per_step_.empty()) summary_.host_syncs_per_step = syncs_per_step_[syncs_per_step_.size() / 2];
  summary_.steps = end_step_;
  summary_.checkpoint = saved.step > 0 ? checkpoint_path(saved.step) : "";
  char line[160];
  std::snprintf(line, sizeof line, "loss %.4f, median %.0f %s/s", summary_.final_loss, summary_.throughput,
                unit_.c_str());
  if (progress_) progress_->finish(line);
  // Memory and, as a diagnostic, agreement across ranks (collective). Never the whole model on
  // a rank: the check gathers one unit at a time, and only on request.
  const MemoryReport memory = final_memory_report(*run_);
  if (run_->lead) log::info("train: " + memory.to_text());
  std::optional<bool> identical;
  if (c_.train.check_replicas) {
    identical = run_->sharded.replicas_identical();
    CADRE_CHECK(*identical, "rank ", run_->rank, ": after training the parameters differ across ranks");
  }
  if (!run_->lead) {
    summary_.lead = false;
    run_->group->barrier();  // rank 0 hosts the store: leave only after everyone is done with it
    return summary_;
  }
  summary_write(*run_, {summary_, resumed_, initialised_from_, memory, identical});
  if (run_->group) run_->group->barrier();
  return summary_;
}

}  // namespace detail

TrainSummary train_run(const Config& config) {
  if (std::unique_ptr<MembershipChannel> channel = MembershipChannel::from_env())
    return detail::train_run_in_memory_recovery(config, *channel);
  detail::Trainer trainer(config);       // inputs, run directory, mesh, model, optimizer, data
  trainer.resume();              // from a checkpoint of its own, or train.init_from's weights
  trainer.open_checkpointing();  // a saver with its own communicator
  trainer.start_observing();     // reports to the agent; the summary's fixed parts
  if (trainer.already_done()) return trainer.nothing_to_train();
  trainer.start();  // the log line, metrics.jsonl, the progress line, signals caught
  for (int64_t step = trainer.first_step(); step < trainer.end_step() && !trainer.stopping(); ++step)
    trainer.run_step(step);
  return trainer.finish();  // the last save, the memory report, summary.json
}

}  // namespace cadre
