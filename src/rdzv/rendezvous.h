// Versioned rendezvous rounds over a KvStore: agents join round k; the round closes when MAX have
// joined, or MIN have and the last call has passed; group ranks follow join order (or node rank
// for the static backend). A running round ends when any agent ends it (worker failure, dead peer,
// scale-up); every agent then joins round k+1. Key layout and the full protocol: docs/DESIGN.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "rdzv/kv_store.h"

namespace cadre::rdzv {

struct RendezvousConfig {
  std::string run_id = "default";
  int64_t min_nodes = 1, max_nodes = 1;
  bool rank_by_node_rank = false;     // static backend: group rank = --node-rank
  double join_timeout_s = 600;        // a round must reach MIN within this
  double last_call_timeout_s = 30;    // after MIN joined, wait this long for more
  double heartbeat_timeout_s = 30;    // a peer whose heartbeat stalls this long is dead
  double poll_interval_s = 0.05;
};

struct NodeInfo {
  std::string addr;        // address other nodes reach this one at
  std::string hostname;
  int64_t local_world_size = 1;
  int64_t node_rank = -1;  // requested rank (static backend, Slurm); -1 = any
  int64_t pid = 0;
  int64_t previous_group_rank = -1;  // in the agent's last round: keeps ranks where they were
  uint16_t liveness_port = 0;        // the agent's LivenessPort on addr (0: none)
};

// One closed round, as seen by one agent.
struct Round {
  int64_t number = 0;
  int64_t group_rank = 0;
  std::vector<NodeInfo> nodes;  // indexed by group rank
  int64_t restart_count = 0;    // failure restarts before this round
  int64_t join_index = 0;       // this agent's slot in the round's keys
  std::vector<int64_t> join_indices;  // slot of each group rank

  int64_t group_world_size() const { return static_cast<int64_t>(nodes.size()); }
  int64_t world_size() const;
  int64_t rank_offset() const;  // global rank of this node's local rank 0
};

// What a running round looks like from one agent's monitor loop.
struct RoundStatus {
  bool ended = false;          // someone ended it: stop workers and join the next round
  std::string end_reason;
  bool workers_alive = false;  // the round ended with all its workers alive: stop them gracefully
  int64_t waiting_nodes = 0;   // agents that arrived late, waiting for the next round
  std::vector<int64_t> dead;   // group ranks whose heartbeats stalled (or sessions expired)
  std::string dead_why;        // how they were found dead, for the log
};

class Rendezvous {
 public:
  Rendezvous(std::unique_ptr<KvStore> store, RendezvousConfig config);

  // Blocks until this agent belongs to a closed round. `interrupted` is polled; when it returns
  // true this throws Interrupted. Throws Error when MIN nodes do not join within the join timeout.
  // Throws JobFinished when the job completed while this agent waited (e.g. it arrived late).
  Round join_next_round(const NodeInfo& me, const std::function<bool()>& interrupted);
  struct Interrupted {};
  struct JobFinished {};
  struct RoundEnded {};

  // Worker master address: the group-rank-0 agent publishes, the others wait for it. Throws
  // RoundEnded if the round ends first (then join the next one).
  void publish_master(const Round& round, const std::string& addr, uint16_t port);
  std::pair<std::string, uint16_t> wait_master(const Round& round, const std::function<bool()>& interrupted);

  // Monitor-loop calls during a round.
  void heartbeat(const Round& round);
  RoundStatus poll(const Round& round);
  // Marks nodes of the round (group ranks, from RoundStatus::dead) as dead, before end_round:
  // the next round closes without waiting for them even where their session lives on (a cut
  // link closes no connection). One that was only slow joins later, as a scale-up.
  void declare_dead(const Round& round, const std::vector<int64_t>& group_ranks, const std::string& why);
  // Ends the round for everyone. A failure counts against --max-restarts (once per round) and its
  // description (JSON) becomes the job's last failure. `workers_alive`: every worker of the
  // round is still there (a scale-up, a node leaving on a signal), so they can stop gracefully
  // (finish a step, checkpoint it); otherwise (a failure, a lost node) they are killed at once.
  void end_round(const Round& round, const std::string& reason, bool is_failure, const std::string& failure_json,
                 bool workers_alive = false);

  int64_t restart_count();
  std::string last_failure();  // JSON, "" when none

  // Exit barrier: this node's workers all succeeded; true once every node of the round has.
  void mark_done(const Round& round);
  bool all_done(const Round& round);
  void mark_job_finished(const Round& round);  // the job is over: late agents may leave
  // The job gave up: late agents leave, and the next agent with this run id starts a new job.
  void mark_job_failed();
  int64_t generation() const { return generation_; }
  // The value every agent of this job generation settles on for `name`: the first proposal
  // stored wins (with etcd, the workers' job secret is agreed on this way).
  std::string agree_on(const std::string& name, const std::string& proposal);

  // Leaving: every agent announces its exit; the hosting agent waits (up to linger_s) until the
  // other agents of the last round have left, since the store dies with it.
  void announce_exit();
  void wait_for_others_to_exit(int64_t expected, double linger_s);

  KvStore& store() { return *store_; }
  const RendezvousConfig& config() const { return config_; }

 private:
  std::string key(const std::string& suffix) const;
  std::string round_key(int64_t round, const std::string& suffix) const;
  int64_t current_round();
  // Blocks until the store may have changed (a watch where the store has one), at most max_s
  // (capped at 1 s so signals and deadlines are noticed).
  void wait_for_change(double max_s);
  // With sessions: a member of `round` whose record exists but whose session key vanished.
  std::optional<int64_t> gone_member(int64_t round, int64_t members);
  // Round k may close before last_call_timeout: every member of round k-1 still alive (its
  // session lives and its liveness port does not refuse) and every agent that waited for round k
  // has joined it (`joined` so far).
  bool survivors_all_joined(int64_t k, int64_t joined);
  // Join index `index` of `round` is an agent whose liveness port refuses connections: its
  // process is gone though its session may live on until the lease's TTL (etcd).
  bool agent_is_gone(int64_t round, int64_t index, const NodeInfo& node);

  std::unique_ptr<KvStore> store_;
  RendezvousConfig config_;
  int64_t generation_ = 0;  // job generation under this run id (see gen in rendezvous.cpp)
  // Heartbeat tracking: per round, per peer join index, the last counter value and when it changed.
  struct Beat { int64_t value = -1; double changed_at = 0; };
  int64_t beats_round_ = -1;
  std::map<int64_t, Beat> beats_;
  // Heartbeats are written and checked at most every heartbeat_timeout/10, not every monitor tick,
  // so the store load stays small with many nodes.
  double last_beat_at_ = -1, last_scan_at_ = -1;
  std::set<std::pair<int64_t, int64_t>> gone_agents_;  // (round, join index) found gone by a probe
};

std::string node_info_to_json(const NodeInfo& info);
NodeInfo node_info_from_json(const std::string& json);

}  // namespace cadre::rdzv
