// The training loop, top to bottom (train_run at the end of this file): set up the run
// (run_setup.cpp), resume from a checkpoint, then for each step run the micro-batches, agree
// across ranks, clip and update, evaluate, checkpoint (in the background) and report; at the
// end wait for the last save and write the summary (run_records.cpp).
#include "train/trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
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

namespace cadre {
namespace {

using Clock = std::chrono::steady_clock;

// One step's figures, once every rank agreed on them.
struct StepFigures {
  double loss_sum = 0, correct = 0;  // over the micro-batches (after agreeing: the mean over ranks)
  obs::StepSplit split;              // compute / communication wait / data wait
  double loss = 0, grad_norm = 0, lr = 0, rate = 0;
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
  StepFigures forward_backward();
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
  bool sharded_recovery() const { return channel_ && c_.parallel.strategy != Strategy::NoShard; }
  void keep_copy(int64_t done, std::string record);
  std::string checkpoint_path(int64_t step) const { return checkpoint_dir_ + "/" + checkpoint_name(step); }

  // In the order the original single function built them: destroyed in reverse (the saver
  // before its communicator, the stop signal's handlers restored first).
  std::unique_ptr<RunSetup> run_;
  const Config& c_;
  std::string checkpoint_dir_;
  Resumed resumed_;
  std::string initialised_from_;
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
};

// --- resume and checkpointing ---------------------------------------------------------------

void Trainer::resume() {
  checkpoint_dir_ = c_.checkpoint.dir.empty() ? c_.run.dir + "/checkpoints" : c_.checkpoint.dir;
  resumed_ = resume_training(c_, checkpoint_dir_, run_->sharded, *run_->optimizer, *run_->train_data, run_->rank,
                             run_->group);
  // A fine-tuning run starts from train.init_from; once it has checkpoints of its own, a
  // restart resumes from those instead.
  if (resumed_.path.empty() && !c_.train.init_from.empty())
    initialised_from_ = init_from_load(c_, run_->sharded, run_->rank, run_->group);
  steps_done_ = resumed_.step;
  position_done_ = int64_t(run_->train_data->position());
  micro_batches_ = c_.optim.grad_accum_steps * run_->dp;
}

// A re-formed group takes the state live ranks carried (a replica, or the copies of a sharded
// group's parts); the global batch stays what it was, gradient accumulation taking up what the
// data-parallel size no longer covers.
bool Trainer::adopt(const Carried& carried) {
  const auto t0 = Clock::now();
  checkpoint_dir_ = c_.checkpoint.dir.empty() ? c_.run.dir + "/checkpoints" : c_.checkpoint.dir;
  std::optional<Adopted> adopted =
      sharded_recovery()
          ? copies_adopt(carried.copies, run_->sharded, *run_->optimizer, *run_->train_data, run_->group, run_->rank)
          : live_state_adopt(carried.replica ? &*carried.replica : nullptr, run_->sharded, *run_->optimizer,
                             *run_->train_data, run_->group, run_->rank);
  if (!adopted) return false;
  CADRE_CHECK(adopted->micro_batches % run_->dp == 0, "rank ", run_->rank, ": the global batch is ",
              adopted->micro_batches, " micro-batches of data.batch_size, which ", run_->dp,
              " data-parallel ranks cannot share evenly; in-memory recovery keeps the global batch, so this group "
              "size cannot go on (restart from a checkpoint, or choose sizes that divide it)");
  run_->c.optim.grad_accum_steps = adopted->micro_batches / run_->dp;
  micro_batches_ = adopted->micro_batches;
  adopted_record_ = adopted->record;
  resumed_.step = steps_done_ = adopted->step;
  position_done_ = int64_t(run_->train_data->position());
  inherited_copies_ = carried.copies;  // until this group's own copies commit
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  const std::string whose = adopted->source >= 0 ? str("state of rank ", adopted->source)
                                                 : str("copies of the ", adopted->owners, " ranks' parts");
  if (run_->lead)
    log::info(str("recovery: ", run_->world, " rank(s) go on from step ", adopted->step, " in memory (round ",
                  channel_ ? channel_->round() : 0, ", ", whose, ", ",
                  adopted->transferred ? str(adopted->bytes / 1e6, " MB sent over the network") : "held by every rank",
                  ", ", seconds, " s; no checkpoint read); optim.grad_accum_steps ", c_.optim.grad_accum_steps,
                  " keeps the global batch of ", micro_batches_, " x ", c_.data.batch_size, " samples"));
  return true;
}

// What this rank carries into the next group. Sharded state: the copies held and, when the
// group re-forms intact (a node joins after a step every rank completed), this step's parts.
Carried Trainer::take_carried(bool group_intact) {
  Carried carried;
  if (!sharded_recovery()) {
    carried.replica =
        live_state_take(run_->sharded, *run_->optimizer, steps_done_, position_done_, micro_batches_, last_record_);
    return carried;
  }
  if (peer_copies_) carried.copies = peer_copies_->release();
  if (group_intact)
    carried.copies.push_back(pack_state(copy_staging_, run_->sharded, *run_->optimizer, run_->rank, run_->world,
                                        {steps_done_, position_done_, run_->optimizer->steps(), micro_batches_,
                                         last_record_}));
  for (PackedState& c : inherited_copies_) carried.copies.push_back(std::move(c));
  inherited_copies_.clear();
  return carried;
}

// Sharded state under --recovery memory: this rank's part after `done` steps (and its record of
// that step), kept and sent to its buddy in the background.
void Trainer::keep_copy(int64_t done, std::string record) {
  obs::ProgressHeartbeat busy;  // a previous exchange may still be finishing: busy, not hung
  peer_copies_->start(pack_state(copy_staging_, run_->sharded, *run_->optimizer, run_->rank, run_->world,
                                 {done, position_done_, run_->optimizer->steps(), micro_batches_, std::move(record)}),
                      *run_->group);
}

// A communicator of this group failed (a peer gone or unreachable), as opposed to an error of
// this rank's own.
bool Trainer::lost_peer() const {
  for (const comm::Communicator* g : {run_->group, run_->mesh->dp(), checkpoint_group_.get()})
    if (g && g->poisoned()) return true;
  if (peer_copies_)
    for (const comm::Communicator* g : peer_copies_->communicators())
      if (g->poisoned()) return true;
  return false;
}

// --recovery memory: when the agent reports this round lost a node, every communicator of the
// group aborts the op it waits in (a cut link resets nothing: that op would wait out its
// deadline, parallel.comm_timeout, or checkpoint.timeout_s for a save's agreement); the step then
// fails as on a reset connection and the group re-forms from memory.
void Trainer::abort_on_lost_node() {
  if (!channel_) return;
  std::vector<comm::Communicator*> groups;
  for (comm::Communicator* g : {run_->group, run_->mesh->dp(), checkpoint_group_.get()})
    if (g && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  if (peer_copies_) groups.insert(groups.end(), peer_copies_->communicators().begin(), peer_copies_->communicators().end());
  channel_->set_abort_handler([groups](const std::string& reason) {
    for (comm::Communicator* g : groups) g->abort(reason);
  });
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

bool Trainer::checkpoint_due(int64_t done) const {
  return done == end_step_ || (c_.checkpoint.interval > 0 && done % c_.checkpoint.interval == 0);
}

// Staging copies this rank's part (waiting first if the previous save still runs); the
// writing happens in the background.
void Trainer::stage_checkpoint(nlohmann::json& record, int64_t done) {
  auto t_stage = Clock::now();
  // Waiting for the previous save, staging and (checkpoint.async false) writing run no
  // collective of training's: tell the agent's stall detection this rank is busy, not hung.
  obs::ProgressHeartbeat busy;
  Snapshot& snapshot = saver_->stage();
  stage_train_state(snapshot, run_->sharded, *run_->optimizer, run_->rank);
  CheckpointManifest header;
  header.step = done;
  header.world_size = run_->world;
  const std::string strategy = strategy_name(c_.parallel.strategy);
  header.strategy = c_.parallel.tp_size > 1 ? str(strategy, ", tp ", c_.parallel.tp_size) : strategy;
  header.state = {{"data_position", static_cast<int64_t>(run_->train_data->position())},
                  {"optimizer_steps", run_->optimizer->steps()}};
  header.config_yaml = config_to_yaml(c_);
  saver_->submit(std::move(header));
  record["checkpoint_stage_s"] = std::chrono::duration<double>(Clock::now() - t_stage).count();
  record["checkpoint_wait_s"] = saver_->last_stage_wait_s();
  observer_->checkpoint_staged(done, record["checkpoint_stage_s"].get<double>());
}

// --- before the first step ------------------------------------------------------------------

void Trainer::start_observing() {
  const int64_t B = c_.data.batch_size, accum = c_.optim.grad_accum_steps;
  const std::string unit = run_->model->throughput_unit();
  observer_ = std::make_unique<obs::TrainObserver>(obs::train_observer_options(
      c_, run_->rank, run_->world, unit, double(B * accum), double(B * accum * run_->train_data->sample_len())));
  int64_t shard_numel = 0;
  for (const auto& p : run_->sharded.parameters()) shard_numel += p.numel();
  const ShardMemory shard_memory = run_->sharded.memory();
  const int64_t optimizer_bytes = run_->optimizer->state_bytes_per_param() * shard_numel;
  observer_->set_model_state_bytes(shard_memory.params + shard_memory.grads + optimizer_bytes);
  // A resume reads the float32 masters and the optimizer's state.
  observer_->started(resumed_.step, resumed_.path, resumed_.load_s,
                     resumed_.path.empty() ? 0 : 4 * shard_numel + optimizer_bytes);
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
  StepFigures f = forward_backward();
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

StepFigures Trainer::forward_backward() {
  const int64_t B = c_.data.batch_size, accum = c_.optim.grad_accum_steps;
  run_->sharded.zero_grad();
  StepFigures f;
  // Summed where the loss lives, in float64 as on the host, and read once per step: on a GPU
  // one host synchronisation instead of one per micro-batch.
  at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kDouble).device(run_->device));
  at::Tensor correct_sum;  // stays undefined unless the model classifies
  for (int64_t micro = 0; micro < accum; ++micro) {
    // Each data-parallel rank takes its slice of the global micro-batch (tensor-parallel
    // ranks the same one); together they read what one rank with dp * B samples would.
    Batch batch = timer_.data([&] {
      return run_->train_data->next(static_cast<uint64_t>(B * run_->dp), static_cast<uint64_t>(run_->dp_rank * B),
                                    static_cast<uint64_t>(B));
    });
    // Gradients are reduced across ranks only in the last micro-batch's backward.
    std::optional<FSDPModule::NoSyncGuard> accumulate;
    if (micro + 1 < accum) accumulate.emplace(&run_->sharded.tree());
    LossOutput out = run_->model->loss(batch);
    (out.loss / double(accum)).backward();
    loss_sum += out.loss.detach().to(at::kDouble);
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
                           {"rss_bytes", process_rss_bytes()}};
  if (f.correct >= 0) record["accuracy"] = f.correct / double(samples_per_step_);
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
  Evaluation e = evaluate(*run_->model, *run_->val_data, c_, run_->dp_rank, run_->dp, run_->mesh->dp());
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

// --recovery memory: the loop above, re-formed in place whenever a peer is lost or a node joins.
// A survivor keeps its state in memory (its replica, or the copies of sharded parts it holds),
// reports the loss to its agent (which ends the round at once), waits for its place in the next
// round and builds the run afresh there; the new group takes the state from the survivors over
// the network. Only when no rank carries one (the first start, a restart of every node, every
// copy of some part lost) does it resume from disk.
TrainSummary train_run_in_memory_recovery(const Config& config, MembershipChannel& channel) {
  CADRE_CONFIG_CHECK(config.parallel.tp_size == 1, "cadre run --recovery memory: parallel.tp_size is ",
                     config.parallel.tp_size, "; in-memory recovery keeps data-parallel state only (tp_size 1): use "
                     "--recovery restart");
  std::optional<comm::JobEnv> env = comm::JobEnv::from_env();
  Carried carried;
  for (;;) {
    std::string lost;
    int rank = env->rank;
    try {
      Trainer trainer(config, env, &channel);
      if (!trainer.adopt(carried)) trainer.resume();
      trainer.open_checkpointing();
      trainer.start_observing();
      if (trainer.already_done()) return trainer.nothing_to_train();
      trainer.start();
      carried = {};  // the group holds it now; kept until here in case the group broke meanwhile
      bool reform = false;
      for (int64_t step = trainer.first_step(); step < trainer.end_step() && !trainer.stopping(); ++step) {
        try {
          trainer.run_step(step);
        } catch (const std::exception& e) {
          if (!trainer.lost_peer()) throw;
          lost = e.what();
          carried = trainer.take_carried(/*group_intact=*/false);
          reform = true;
          break;
        }
        if (trainer.reform_due()) {
          carried = trainer.take_carried(/*group_intact=*/true);
          reform = true;
          break;
        }
      }
      if (!reform) return trainer.finish();
    } catch (const ConfigError&) {
      throw;
    } catch (const Error& e) {
      // Building the announced group failed (a member went meanwhile): a survivor keeps its
      // state and waits for the next round. A newcomer has nothing to keep and fails, unless its
      // agent already announced a newer round (it was building one the others had left: the
      // soak saw such a failure cost a restart each round until --max-restarts ran out).
      if (carried.empty() && !channel.pending()) throw;
      lost = e.what();
    }
    if (!lost.empty()) {
      log::warn(str("recovery: rank ", rank, " lost a peer (", lost, "); ", carried.describe(),
                    " and waiting for the re-formed group"));
      channel.report_lost(rank, lost);
    }
    env = channel.next(*env, /*timeout_s=*/3600);
  }
}

}  // namespace

TrainSummary train_run(const Config& config) {
  if (std::unique_ptr<MembershipChannel> channel = MembershipChannel::from_env())
    return train_run_in_memory_recovery(config, *channel);
  Trainer trainer(config);       // inputs, run directory, mesh, model, optimizer, data
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
