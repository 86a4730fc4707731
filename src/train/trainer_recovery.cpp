// The Trainer under --recovery memory (trainer_impl.h): the state a rank carries into a
// re-formed group and adopts from it, copies of sharded state in a peer's memory, aborting a
// group's operations when a node is lost, and the loop that re-forms the group in place.
#include "train/trainer_impl.h"

namespace cadre::detail {

// A re-formed group takes the state live ranks carried (a replica, or the copies of a sharded
// group's parts); the global batch stays what it was, gradient accumulation taking up what the
// data-parallel size no longer covers.
bool Trainer::adopt(const Carried& carried) {
  const auto t0 = Clock::now();
  checkpoint_dir_ = c_.checkpoint.dir.empty() ? c_.run.dir + "/checkpoints" : c_.checkpoint.dir;
  const LiveState* replica = carried.replica ? &*carried.replica : nullptr;
  std::optional<Adopted> adopted =
      sharded_recovery()
          ? copies_adopt(carried.copies, run_->sharded, *run_->optimizer, *run_->train_data, run_->group, run_->rank,
                         stage_index())
      : run_->pipeline
          ? live_state_adopt_stages(replica, run_->sharded, *run_->optimizer, *run_->train_data, *run_->mesh)
          : live_state_adopt(replica, run_->sharded, *run_->optimizer, *run_->train_data, run_->group, run_->rank);
  if (!adopted) return false;
  CADRE_CHECK(adopted->micro_batches % run_->dp == 0, "rank ", run_->rank, ": the global batch is ",
              adopted->micro_batches, " micro-batches of data.batch_size, which ", run_->dp,
              " data-parallel ranks cannot share evenly; in-memory recovery keeps the global batch, so this group "
              "size cannot go on (restart from a checkpoint, or choose sizes that divide it)");
  run_->c.optim.grad_accum_steps = adopted->micro_batches / run_->dp;
  if (run_->pipeline) pipeline_set_accumulation(*run_->pipeline, c_.parallel, c_.optim.grad_accum_steps);
  micro_batches_ = adopted->micro_batches;
  adopted_record_ = adopted->record;
  resumed_.step = steps_done_ = adopted->step;
  position_done_ = int64_t(run_->train_data->position());
  inherited_copies_ = carried.copies;  // until this group's own copies commit
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::string whose = adopted->owners > 0   ? str("copies of the ", adopted->owners, " ranks' parts")
                      : adopted->stages > 0 ? str("each of the ", adopted->stages, " stages from its own survivors")
                                            : str("state of rank ", adopted->source);
  if (adopted->owners > 0 && adopted->stages > 0) whose += str(" of ", adopted->stages, " pipeline stages");
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
    carried.replica->stage = stage_index();
    return carried;
  }
  if (peer_copies_) carried.copies = peer_copies_->release();
  if (group_intact)
    carried.copies.push_back(pack_state(copy_staging_, run_->sharded, *run_->optimizer, run_->rank, run_->world,
                                        {steps_done_, position_done_, run_->optimizer->steps(), micro_batches_,
                                         last_record_, stage_index()}));
  for (PackedState& c : inherited_copies_) carried.copies.push_back(std::move(c));
  inherited_copies_.clear();
  return carried;
}

// Sharded state under --recovery memory: this rank's part after `done` steps (and its record of
// that step), kept and sent to its buddy in the background.
void Trainer::keep_copy(int64_t done, std::string record) {
  obs::ProgressHeartbeat busy;  // a previous exchange may still be finishing: busy, not hung
  peer_copies_->start(pack_state(copy_staging_, run_->sharded, *run_->optimizer, run_->rank, run_->world,
                                 {done, position_done_, run_->optimizer->steps(), micro_batches_, std::move(record),
                                  stage_index()}),
                      *run_->group);
}

// A communicator of this group failed (a peer gone or unreachable), as opposed to an error of
// this rank's own.
bool Trainer::lost_peer() const {
  const std::vector<comm::Communicator*> all = communicators();
  return std::any_of(all.begin(), all.end(), [](const comm::Communicator* g) { return g->poisoned(); });
}

// Every communicator of this rank: training's (the pipeline's links too), the saver's and the
// peer copies'.
std::vector<comm::Communicator*> Trainer::communicators() const {
  std::vector<comm::Communicator*> groups;
  std::vector<comm::Communicator*> candidates = {run_->group, run_->mesh->dp(), run_->mesh->pp(), checkpoint_group_.get()};
  if (run_->pipeline && run_->pipeline->links) {
    const std::vector<comm::Communicator*> links = run_->pipeline->links->communicators();
    candidates.insert(candidates.end(), links.begin(), links.end());
  }
  for (comm::Communicator* g : candidates)
    if (g && std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
  if (peer_copies_) groups.insert(groups.end(), peer_copies_->communicators().begin(), peer_copies_->communicators().end());
  return groups;
}

// --recovery memory: when the agent reports this round lost a node, every communicator of the
// group aborts the op it waits in (a cut link resets nothing: that op would wait out its
// deadline, parallel.comm_timeout, or checkpoint.timeout_s for a save's agreement); the step then
// fails as on a reset connection and the group re-forms from memory.
void Trainer::abort_on_lost_node() {
  if (!channel_) return;
  channel_->set_abort_handler([groups = communicators()](const std::string& reason) {
    for (comm::Communicator* g : groups) g->abort(reason);
  });
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

}  // namespace cadre::detail
