// The Trainer's checkpoints (trainer_impl.h): where a run starts (its own latest checkpoint, or
// train.init_from's weights) and the saves that run in the background.
#include "train/trainer_impl.h"

namespace cadre::detail {

void Trainer::resume() {
  checkpoint_dir_ = c_.checkpoint.dir.empty() ? c_.run.dir + "/checkpoints" : c_.checkpoint.dir;
  if (c_.lora.rank > 0) base_fingerprint_ = frozen_base_fingerprint(run_->sharded, run_->group);
  resumed_ = resume_training(c_, checkpoint_dir_, run_->sharded, *run_->optimizer, *run_->train_data, run_->rank,
                             run_->group, base_fingerprint_, run_->pipeline ? &run_->pipeline->held_elsewhere : nullptr);
  // A fine-tuning run starts from train.init_from; once it has checkpoints of its own, a
  // restart resumes from those instead.
  if (resumed_.path.empty() && !c_.train.init_from.empty())
    initialised_from_ = init_from_load(c_, run_->sharded, run_->rank, run_->group, run_->checkpoint_source.get());
  steps_done_ = resumed_.step;
  position_done_ = int64_t(run_->train_data->position());
  micro_batches_ = c_.optim.grad_accum_steps * run_->dp;
}

void Trainer::open_checkpointing() {
  if (run_->group) {
    // Saves agree from a background thread: a communicator of their own keeps those
    // collectives out of training's order. A rank waits there while its slowest peer still
    // writes its part, hence a timeout of its own.
    std::vector<int> all(static_cast<size_t>(run_->world));
    for (int r = 0; r < run_->world; ++r) all[r] = r;
    comm::CommOptions options = run_->group->options();
    options.timeout = std::chrono::milliseconds(static_cast<int64_t>(c_.checkpoint.timeout_s * 1000));
    checkpoint_group_ = run_->group->subgroup(all, "checkpoint", &options);
  }
  saver_ = std::make_unique<CheckpointSaver>(
      SaverOptions{checkpoint_dir_, run_->rank, run_->world, c_.checkpoint.keep, c_.checkpoint.async},
      [g = checkpoint_group_.get()](bool ok) { return comm::all_ranks_agree(g, ok); });
  if (sharded_recovery() && run_->group) {
    const char* local = std::getenv("LOCAL_WORLD_SIZE");
    peer_copies_ = std::make_unique<PeerCopies>(*run_->group, local && *local ? std::atoi(local) : run_->world);
  }
  abort_on_lost_node();  // the saver's and the peer copies' communicators too
  end_step_ = c_.train.stop_at > 0 ? c_.train.stop_at : c_.train.steps;
}

// An error is unwinding through the trainer, or (--recovery memory) it ends because a peer is
// lost. A save still in flight would hold this rank in the saver's destructor until its
// agreement times out (checkpoint.timeout_s, 10 minutes by default: a peer that went silent
// never answers), and the error would reach the log and the agent only then. Aborting the
// saver's communicator ends that agreement at once; the step it was writing stays uncommitted
// and the earlier checkpoints stay intact.
void Trainer::abandon_background_save() noexcept {
  if (!saver_ || !checkpoint_group_) return;
  const int64_t step = saver_->in_flight();
  if (step < 0) return;
  log::warn(str("checkpoint: rank ", run_->rank, " stops training while its step-", step,
                " save is in flight: abandoning that save"));
  checkpoint_group_->abort(str("rank ", run_->rank, " abandoned the step-", step, " save (training stopped)"));
}

bool Trainer::checkpoint_due(int64_t done) const {
  return (done == end_step_ && c_.checkpoint.at_end) || (c_.checkpoint.interval > 0 && done % c_.checkpoint.interval == 0);
}

// Staging copies this rank's part (waiting first if the previous save still runs); the
// writing happens in the background.
void Trainer::stage_checkpoint(nlohmann::json& record, int64_t done) {
  auto t_stage = Clock::now();
  // Waiting for the previous save, staging and (checkpoint.async false) writing run no
  // collective of training's: tell the agent's stall detection this rank is busy, not hung.
  obs::ProgressHeartbeat busy;
  Snapshot& snapshot = saver_->stage();
  // The run's last checkpoint (its end, or a stop on a signal): nothing changes the state while
  // it is written (finish() waits for it), so it is written from where it is, without a copy
  // the size of the state on top of the run's peak.
  const bool last = done == end_step_ || stopping_;
  stage_train_state(snapshot, run_->sharded, *run_->optimizer, run_->rank, last ? CpuStaging::Borrow : CpuStaging::Copy,
                    base_fingerprint_ ? FrozenStaging::Leave : FrozenStaging::Include);
  CheckpointManifest header;
  header.step = done;
  header.world_size = run_->world;
  const std::string strategy = strategy_name(c_.parallel.strategy);
  header.strategy = c_.parallel.tp_size > 1 ? str(strategy, ", tp ", c_.parallel.tp_size) : strategy;
  header.state = {{"data_position", static_cast<int64_t>(run_->train_data->position())},
                  {"optimizer_steps", run_->optimizer->steps()}};
  if (base_fingerprint_) header.state[kBaseFingerprintState] = static_cast<int64_t>(*base_fingerprint_);
  header.config_yaml = config_to_yaml(c_);
  saver_->submit(std::move(header));
  record["checkpoint_stage_s"] = std::chrono::duration<double>(Clock::now() - t_stage).count();
  record["checkpoint_wait_s"] = saver_->last_stage_wait_s();
  observer_->checkpoint_staged(done, record["checkpoint_stage_s"].get<double>());
}

}  // namespace cadre::detail
