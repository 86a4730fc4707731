// In-memory recovery of sharded state (`cadre run --recovery memory` with FULL_SHARD,
// SHARD_GRAD_OP, HYBRID_SHARD or ZERO1): every `checkpoint.memory_interval` steps each rank packs
// its part of the state (train/packed_state.h), keeps it, and sends a copy to its buddy, a rank on
// another node ((rank + ranks per node) mod world), receiving the copy of the rank whose buddy it
// is in turn. The exchange runs on a background thread over communicators of its own (one per
// pair), so training goes on meanwhile. A copy replaces the previous one only once every rank's
// exchange completed (commit(), agreed in a step's all-reduce): a failure in the middle of an
// exchange still finds the previous copies complete. Losing one node loses at most
// memory_interval steps and reads no file.
#pragma once

#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "train/packed_state.h"

namespace cadre {

class PeerCopies {
 public:
  // Collective over `group`: each rank builds its pair communicators, in one order for all.
  PeerCopies(comm::Communicator& group, int ranks_per_node);
  ~PeerCopies();  // aborts an exchange still running
  PeerCopies(const PeerCopies&) = delete;
  PeerCopies& operator=(const PeerCopies&) = delete;

  int buddy() const { return buddy_; }  // receives this rank's copies
  int giver() const { return giver_; }  // sends this rank its copies

  // Training thread, after step `state.step` on every rank alike: keeps `state` and starts the
  // exchange. An exchange still pending is first waited for and committed (a tiny all-reduce).
  void start(PackedState state, comm::Communicator& group);
  bool pending() const { return pending_own_.has_value(); }  // started, not committed
  bool exchanged() const { return done_.load(); }            // this rank's side finished without error
  // Every rank's side finished: the pending copies replace the kept ones.
  void commit();
  // After a failure: aborts the exchange if it still runs and hands over the complete copies
  // (this rank's and its giver's, kept and pending). The object is empty afterwards.
  std::vector<PackedState> release();
  const std::vector<comm::Communicator*>& communicators() const { return communicators_; }

 private:
  void exchange();  // the background thread
  void join();

  int rank_ = 0, buddy_ = 0, giver_ = 0;
  std::unique_ptr<comm::Communicator> to_buddy_, from_giver_;  // the same one when buddy == giver
  std::vector<comm::Communicator*> communicators_;
  std::optional<PackedState> kept_own_, kept_received_, pending_own_;
  std::optional<PackedState> pending_received_;  // written by the thread, read after it ended
  std::atomic<bool> done_{false};
  std::exception_ptr error_;  // the thread's, read after join
  std::thread thread_;
};

}  // namespace cadre
