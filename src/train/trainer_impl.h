// The trainer's state between the steps of a run (internal to train/: trainer.h is the API).
// Its member functions are implemented by concern, one file each:
//   trainer.cpp                before the first step, one step, the end, train_run
//   trainer_checkpointing.cpp  resume, train.init_from, the background saves
//   trainer_pipeline.cpp       one step's micro-batches through a pipeline stage
//   trainer_recovery.cpp       --recovery memory: state carried into a re-formed group, peer
//                              copies, aborting on a lost node, and the loop that re-forms
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_saver.h"
#include "core/cpu_block_cache.h"
#include "core/device.h"
#include "core/error.h"
#include "core/json_log.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/strategy.h"
#include "core/sysinfo.h"
#include "obs/progress_heartbeat.h"
#include "obs/train_observer.h"
#include "train/adapter_checkpoint.h"
#include "train/checkpointing.h"
#include "train/copies_adopt.h"
#include "train/evaluate.h"
#include "train/init_from.h"
#include "train/live_state.h"
#include "train/membership_channel.h"
#include "train/packed_state.h"
#include "train/peer_copies.h"
#include "train/resume.h"
#include "train/run_records.h"
#include "train/run_setup.h"
#include "train/stop_signal.h"

namespace cadre::detail {

using Clock = std::chrono::steady_clock;

// Whether gradients stay whole across a step's micro-batches and are reduced across ranks only
// in its last backward (NO_SHARD, ZERO1, parallel.accumulate_unsharded); sharded ones are
// reduce-scattered in every backward.
inline bool accumulates_whole_gradients(const ParallelConfig& p) {
  return p.accumulate_unsharded || !strategy_shards_parameters(p.strategy);
}

// One step's figures, once every rank agreed on them.
struct StepFigures {
  double loss_sum = 0, correct = 0;  // over the micro-batches (after agreeing: the mean over ranks)
  obs::StepSplit split;              // compute / communication wait / data wait
  double loss = 0, grad_norm = 0, lr = 0, rate = 0;
  // Pipeline stages (parallel.pp_size > 1), one entry per stage: forward and backward compute,
  // and time spent waiting on a neighbour (the bubble, and transfers not hidden).
  std::vector<double> stage_compute_s, stage_wait_s;
};

// What a rank of a group that re-forms in memory carries into the next one: its replica
// (NO_SHARD), or the packed copies of sharded state it holds (its own and its giver's).
struct Carried {
  std::optional<LiveState> replica;
  std::vector<PackedState> copies;
  bool empty() const { return !replica && copies.empty(); }
  std::string describe() const {
    if (replica) return str("keeping this rank's state in memory (step ", replica->step, ")");
    if (copies.empty()) return "it holds no state yet";
    std::string steps;
    for (const PackedState& c : copies) steps += str(steps.empty() ? "" : ", ", "rank ", c.owner, "@", c.step);
    return str("keeping ", copies.size(), " in-memory cop", copies.size() == 1 ? "y" : "ies", " (", steps, ")");
  }
};

class Trainer {
 public:
  // `env` and `channel`: the ranks of a group re-formed in memory, and its agent's channel
  // (--recovery memory).
  explicit Trainer(const Config& config, const std::optional<comm::JobEnv>& env = std::nullopt,
                   MembershipChannel* channel = nullptr)
      : run_(run_set_up(config, env)), c_(run_->c), channel_(channel) {
    abort_on_lost_node();
  }
  ~Trainer() {
    if (channel_) channel_->set_abort_handler(nullptr);  // before the communicators go
    // A save in flight cannot finish once this rank failed or a peer is lost: its agreement
    // needs every rank.
    if (std::uncaught_exceptions() > uncaught_at_start_ || lost_peer()) abandon_background_save();
  }
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  void resume();
  bool adopt(const Carried& carried);
  Carried take_carried(bool group_intact);
  bool lost_peer() const;
  bool reform_due() const { return reform_due_; }
  void open_checkpointing();
  void start_observing();
  bool already_done() const { return resumed_.step >= end_step_; }
  TrainSummary nothing_to_train();
  void start();
  int64_t first_step() const { return resumed_.step; }
  int64_t end_step() const { return end_step_; }
  bool stopping() const { return stopping_ != 0; }
  void run_step(int64_t step);
  TrainSummary finish();

 private:
  std::vector<double> micro_batch_weights(const std::vector<Batch>& batches);
  StepFigures forward_backward(int64_t step);
  StepFigures forward_backward_pipeline(int64_t step);  // trainer_pipeline.cpp
  void agree_across_ranks(StepFigures& f, int64_t step);
  void update(StepFigures& f, int64_t step);
  nlohmann::json measure(StepFigures& f, int64_t step);
  bool evaluation_due(int64_t done) const;
  bool training_forward_next(int64_t done) const;
  void evaluate_into(nlohmann::json& record, int64_t done);
  bool checkpoint_due(int64_t done) const;
  void stage_checkpoint(nlohmann::json& record, int64_t done);
  void report(const StepFigures& f, nlohmann::json& record, int64_t done);
  TrainSummary stopped(const SaveStats& saved);
  TrainSummary completed(const SaveStats& saved);
  void abort_on_lost_node();
  std::vector<comm::Communicator*> communicators() const;
  void abandon_background_save() noexcept;
  bool sharded_recovery() const { return channel_ && c_.parallel.strategy != Strategy::NoShard; }
  int stage_index() const { return run_->pipeline ? int(run_->pipeline->stage_index) : 0; }  // 0 without stages
  void keep_copy(int64_t done, std::string record);
  std::string checkpoint_path(int64_t step) const { return checkpoint_dir_ + "/" + checkpoint_name(step); }

  // In the order the original single function built them: destroyed in reverse (the saver
  // before its communicator, the stop signal's handlers restored first).
  std::unique_ptr<RunSetup> run_;
  const Config& c_;
  std::string checkpoint_dir_;
  Resumed resumed_;
  std::string initialised_from_;
  // A LoRA run's base (adapter_checkpoint.h): recorded in its checkpoints, which leave it out.
  std::optional<uint64_t> base_fingerprint_;
  std::unique_ptr<comm::Communicator> checkpoint_group_;
  std::unique_ptr<CheckpointSaver> saver_;
  // Sharded state under --recovery memory: copies of this rank's part in a peer's memory, and
  // those the group was re-formed from, kept until the first copies of this group commit.
  std::unique_ptr<PeerCopies> peer_copies_;
  std::vector<PackedState> inherited_copies_;
  Snapshot copy_staging_;  // reused by every copy
  int64_t end_step_ = 0;
  std::unique_ptr<obs::TrainObserver> observer_;
  TrainSummary summary_;
  int64_t samples_per_step_ = 0, units_per_step_ = 0;
  std::string unit_;
  std::unique_ptr<JsonLog> metrics_;
  std::vector<double> rates_;
  std::unique_ptr<HostSyncCounter> host_syncs_;  // on the training thread, from the first step
  std::vector<double> syncs_per_step_;
  std::unique_ptr<Progress> progress_;
  std::string progress_text_;
  std::optional<StopSignal> stop_signal_;
  int stopping_ = 0;  // the signal every rank agreed to stop on
  obs::StepTimer timer_;
  // In-memory recovery: the agent's channel (null without --recovery memory), steps completed
  // and where the data stood then, the global batch in micro-batches, and whether every rank
  // agreed to re-form after this step (a node joins).
  MembershipChannel* channel_ = nullptr;
  int64_t steps_done_ = 0, position_done_ = 0, micro_batches_ = 0;
  bool reform_due_ = false;
  std::string last_record_;     // this rank's record of its last step (every rank measures it)
  std::string adopted_record_;  // the record of the step a re-formed group took over
  // Exceptions already in flight when the trainer was built: more at its destruction means an
  // error is unwinding through it.
  int uncaught_at_start_ = std::uncaught_exceptions();
};

// --recovery memory: train_run's loop, re-formed in place whenever a peer is lost or a node
// joins (trainer_recovery.cpp).
TrainSummary train_run_in_memory_recovery(const Config& config, MembershipChannel& channel);

}  // namespace cadre::detail
