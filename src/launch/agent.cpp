// The elastic agent loop (see agent.h): rendezvous -> start workers -> monitor -> restart or exit.
#include "launch/agent.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "launch/error_file.h"
#include "launch/group_guard.h"
#include "launch/signals.h"
#include "launch/worker_group.h"
#include "obs/agent_observer.h"
#include "obs/proc_stat.h"
#include "rdzv/endpoint.h"
#include "rdzv/liveness_port.h"
#include "rdzv/membership.h"
#include "store/secret.h"

namespace cadre::launch {
namespace {

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// The environment torchrun gives its workers, for each local rank of this node.
std::vector<WorkerSpec> worker_specs(const AgentConfig& cfg, const rdzv::Round& round,
                                     const std::pair<std::string, uint16_t>& master, const std::string& node_addr) {
  std::vector<WorkerSpec> specs;
  int64_t world = round.world_size(), offset = round.rank_offset();
  std::string dir = str(cfg.log_dir, "/round_", round.number);
  for (int64_t lr = 0; lr < cfg.nproc_per_node; ++lr) {
    WorkerSpec s;
    s.local_rank = lr;
    s.global_rank = offset + lr;
    std::string rank_dir = str(dir, "/rank_", s.global_rank);
    std::filesystem::create_directories(rank_dir);
    s.stdout_path = rank_dir + "/stdout.log";
    s.stderr_path = rank_dir + "/stderr.log";
    s.error_file_path = rank_dir + "/error.json";
    auto n = [](int64_t v) { return std::to_string(v); };
    s.env = {{"RANK", n(s.global_rank)},
             {"LOCAL_RANK", n(lr)},
             {"WORLD_SIZE", n(world)},
             {"LOCAL_WORLD_SIZE", n(cfg.nproc_per_node)},
             {"GROUP_RANK", n(round.group_rank)},
             {"GROUP_WORLD_SIZE", n(round.group_world_size())},
             {"ROLE_NAME", "default"},
             {"ROLE_RANK", n(s.global_rank)},
             {"ROLE_WORLD_SIZE", n(world)},
             {"MASTER_ADDR", master.first},
             {"MASTER_PORT", n(master.second)},
             {"TORCHELASTIC_RESTART_COUNT", n(round.restart_count)},
             {"TORCHELASTIC_MAX_RESTARTS", n(cfg.max_restarts)},
             {"TORCHELASTIC_RUN_ID", cfg.rendezvous.run_id},
             {"TORCHELASTIC_USE_AGENT_STORE", "False"},
             {"TORCHELASTIC_ERROR_FILE", s.error_file_path},
             {store::kSecretFdEnv, std::to_string(WorkerGroup::kInheritedFd)}};
    // Workers bind their collectives' sockets to the address peers reach this node at. Left to
    // themselves they would use the hostname, which often resolves to loopback (Debian maps it to
    // 127.0.1.1): peers on other machines would then be told to connect to their own loopback.
    const char* exported = std::getenv("CADRE_COMM_HOST");
    if (!exported || !*exported) s.env.emplace_back("CADRE_COMM_HOST", node_addr);
    if (cfg.recovery_in_memory) {
      s.env.emplace_back(rdzv::kMembershipFdEnv, n(WorkerGroup::kChannelFd));
      s.env.emplace_back(rdzv::kRoundEnv, n(round.number));
    }
    // As torchrun: several workers per node each get one OpenMP thread unless told otherwise.
    if (cfg.nproc_per_node > 1 && !std::getenv("OMP_NUM_THREADS")) s.env.emplace_back("OMP_NUM_THREADS", "1");
    specs.push_back(std::move(s));
  }
  return specs;
}

// Sleeps up to `seconds`, returning early when a signal arrives.
void sleep_interruptibly(double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!signals_received() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
}

// How long workers get between SIGTERM and SIGKILL when a peer is gone (a failure, a lost node).
// Long enough for a program's own clean-up (a shell trap, a flush); not the full --stop-timeout,
// which graceful stops need: a training step cannot finish without the lost ranks, so waiting
// longer would only add to the recovery time.
double lost_peer_grace_s(const AgentConfig& cfg) { return std::min(cfg.stop_timeout_s, 1.0); }

// The root-cause record of a group restarted after a stall: the rank the diagnosis names (its
// local rank and pid when it is this node's), the stall, and the diagnosis.
std::string stall_failure(const obs::AgentObserver& observer, const WorkerGroup& group, const std::string& reason,
                          const std::string& hostname, const rdzv::Round& round) {
  const int rank = observer.stalled_rank();
  const WorkerSpec* spec = nullptr;
  for (const auto& s : group.specs())
    if (s.global_rank == rank) spec = &s;
  FailureContext context{hostname, round.group_rank, round.number, round.restart_count,
                         spec ? spec->error_file_path : ""};
  const std::string hang = observer.last_hang() ? observer.last_hang()->to_json().dump() : "";
  return stall_failure_to_json(rank, spec ? spec->local_rank : -1, spec ? group.pid(spec->local_rank) : 0, reason,
                               hang, context);
}

// A stopped process (SIGSTOP, a debugger) counts as running, but could never read its
// membership line: such a group is not kept for the next round.
bool group_has_stopped_worker(const WorkerGroup& group) {
  for (const auto& spec : group.specs())
    if (obs::proc_is_stopped(obs::proc_stat_read(group.pid(spec.local_rank)))) return true;
  return false;
}

// --recovery memory: a stall is acted on by the node that holds its cause (it replaces its
// workers, and the others re-form with the newcomers from memory); the other nodes keep theirs,
// which see the loss as soon as the stuck process is gone. True while this node leaves it to
// that node. When nobody acts within max(2 stall timeouts, 10 s) (no diagnosis to go by, or
// that node's agent is itself stuck), false: the group restarts, as without --recovery memory.
bool stall_left_to_its_node(const AgentConfig& cfg, const obs::AgentObserver& observer, const std::string& reason,
                            std::optional<std::chrono::steady_clock::time_point>* deferred_since) {
  if (!cfg.recovery_in_memory || observer.stall_cause_is_local()) return false;
  const auto now = std::chrono::steady_clock::now();
  if (!*deferred_since) {
    *deferred_since = now;
    log::warn(str(reason, "; rank ", observer.stalled_rank(),
                  " is not this node's: its node replaces it, this node's workers stay (--recovery memory)"));
  }
  const double patience_s = std::max(2 * cfg.stall_timeout_s, 10.0);
  return std::chrono::duration<double>(now - **deferred_since).count() < patience_s;
}

// --recovery memory: the live workers kept from the last round go on into `round`, each told its
// new rank over its membership channel. False (the caller restarts them) when one is gone.
bool announce_round(WorkerGroup& group, const rdzv::Round& round, const std::pair<std::string, uint16_t>& master) {
  if (group.poll() != WorkerGroup::State::Running) return false;
  for (WorkerSpec spec : group.specs()) {
    spec.global_rank = round.rank_offset() + spec.local_rank;  // logs stay where the worker writes them
    rdzv::Membership m{round.number, round.restart_count, int(spec.global_rank), int(round.world_size()),
                       master.first, master.second};
    if (!group.send_line(spec.local_rank, rdzv::membership_to_line(m))) return false;
    group.respecify(spec.local_rank, spec);
  }
  return true;
}

// --recovery memory: the round ended because a node is gone. The kept workers abort its
// collectives at once rather than wait for their deadline (a cut link resets nothing, so a
// peer on it is only found out by parallel.comm_timeout otherwise).
void abort_round(WorkerGroup& group, int64_t round, const std::string& why) {
  for (const WorkerSpec& spec : group.specs()) group.send_line(spec.local_rank, rdzv::round_lost_line(round, why));
}

// The first report of this round's workers that a collective lost a peer ("" when none). Reports
// of an earlier round are stale: that round already ended.
std::string lost_peer_report(WorkerGroup& group, int64_t round) {
  std::string reason;
  for (const std::string& line : group.read_lines()) {
    auto lost = rdzv::lost_peer_parse(line);
    if (lost && lost->round == round && reason.empty()) reason = lost->reason;
  }
  return reason;
}

}  // namespace

int agent_run(const AgentConfig& cfg) {
  signals_install();
  // Orphaned grandchildren of workers are re-parented to us, so stop() can reap them.
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  // Before any thread starts: if we die (even by SIGKILL), the guard kills the workers' groups.
  ProcessGroupGuard guard;

  auto opened = rdzv::store_open(cfg.store);
  rdzv::Rendezvous rendezvous(std::move(opened.store), cfg.rendezvous);
  // Workers read the secret from an inherited descriptor: never in an argument, an
  // environment or a log.
  const std::string secret = cfg.secret.empty() ? rendezvous.agree_on("job_secret", store::job_secret_generate()) : cfg.secret;
  const int secret_fd = store::job_secret_fd_create(secret);
  struct CloseOnExit {
    int fd;
    ~CloseOnExit() { ::close(fd); }
  } close_secret{secret_fd};
  rdzv::NodeInfo me;
  me.addr = cfg.local_addr.empty() ? rdzv::local_address_towards(opened.endpoint.host) : cfg.local_addr;
  me.hostname = host_name();
  me.local_world_size = cfg.nproc_per_node;
  me.node_rank = cfg.store.node_rank;
  me.pid = ::getpid();
  // Lets re-forming peers tell at once that this agent died (its etcd lease outlives it).
  std::unique_ptr<rdzv::LivenessPort> liveness;
  try {
    liveness = std::make_unique<rdzv::LivenessPort>(me.addr);
    me.liveness_port = liveness->port();
  } catch (const Error& e) {
    log::warn(str(e.what(), ": if this agent dies, its peers wait for its session or the last call"));
  }
  auto interrupted = [] { return signals_received() != 0; };
  int64_t last_round_size = 1;
  std::unique_ptr<WorkerGroup> kept;  // --recovery memory: live workers going on into the next round
  obs::AgentObserver observer({cfg.rendezvous.run_id, me.hostname, cfg.metrics_addr, int(cfg.metrics_port),
                               cfg.stall_timeout_s, cfg.stall_restarts, cfg.error_file, cfg.log_dir});

  // Every exit path announces itself; the store host waits for its peers (the store dies with it).
  auto leave = [&](int code, bool linger) {
    try {
      rendezvous.announce_exit();
      if (opened.is_host && linger) rendezvous.wait_for_others_to_exit(last_round_size, cfg.exit_linger_s);
    } catch (const Error& e) {
      log::warn(str("leaving the rendezvous: ", e.what()));
    }
    return code;
  };
  auto give_up = [&] {
    std::string failure = rendezvous.last_failure();
    std::string message = str("workers failed ", rendezvous.restart_count(), " times with --max-restarts ",
                              cfg.max_restarts, "; giving up");
    const int code = failure_exit_code(failure);
    log::error(message + "\n" + failure_summary(failure));
    error_file_write(cfg.error_file, message, cfg.max_restarts, failure);
    observer.annotate_error_file();  // a hang found in the last round goes with the root cause
    log::error("error file: " + cfg.error_file);
    try {
      rendezvous.mark_job_failed();  // the next `cadre run` with this run id starts afresh
    } catch (const Error& e) {
      log::warn(str("marking the job as failed in the rendezvous store: ", e.what()));
    }
    if (code != 1) log::error(str("exiting with ", code, " as the failed worker did (bad input: no retry can help)"));
    return leave(code, true);
  };
  auto on_signal = [&] {
    int sig = signals_received();
    log::warn(str("received signal ", sig, "; workers stopped, exiting"));
    return leave(128 + sig, false);
  };

  for (;;) {
    if (rendezvous.restart_count() > cfg.max_restarts) return give_up();
    rdzv::Round round;
    try {
      round = rendezvous.join_next_round(me, interrupted);
    } catch (const rdzv::Rendezvous::Interrupted&) {
      return on_signal();
    } catch (const rdzv::Rendezvous::JobFinished&) {
      if (rendezvous.restart_count() > cfg.max_restarts) return give_up();
      log::info(str("job '", cfg.rendezvous.run_id, "' already finished; nothing to do"));
      return 0;  // never a member of the last round: the host does not wait for us
    }
    last_round_size = round.group_world_size();
    me.previous_group_rank = round.group_rank;
    if (round.restart_count > cfg.max_restarts) return give_up();
    std::pair<std::string, uint16_t> master;
    try {
      if (round.group_rank == 0) {
        master = {me.addr, rdzv::free_port(me.addr)};
        rendezvous.publish_master(round, master.first, master.second);
      } else {
        master = rendezvous.wait_master(round, interrupted);
      }
    } catch (const rdzv::Rendezvous::Interrupted&) {
      return on_signal();
    } catch (const rdzv::Rendezvous::RoundEnded&) {
      log::info(str("round ", round.number, " ended before it started here; joining the next one"));
      continue;
    }
    log::info(str("round ", round.number, ": group rank ", round.group_rank, " of ", round.group_world_size(),
                  " nodes, ranks ", round.rank_offset(), "..", round.rank_offset() + cfg.nproc_per_node - 1, " of ",
                  round.world_size(), ", restart count ", round.restart_count, ", master ", master.first, ":",
                  master.second));

    // Workers report to the observer and keep their flight recorders in their log directories.
    auto rank_dir = [](const WorkerSpec& s) { return std::filesystem::path(s.stdout_path).parent_path().string(); };
    std::vector<WorkerSpec> specs = worker_specs(cfg, round, master, me.addr);
    for (auto& s : specs)
      for (auto& kv : observer.worker_env(rank_dir(s))) s.env.push_back(kv);
    std::unique_ptr<WorkerGroup> group = std::move(kept);
    if (group && announce_round(*group, round, master)) {
      log::info(str("round ", round.number, ": this node's ", cfg.nproc_per_node,
                    " live worker(s) go on into it without a restart (--recovery memory)"));
    } else {
      if (group) group->stop(SIGTERM, lost_peer_grace_s(cfg));
      group = std::make_unique<WorkerGroup>(cfg.program, std::move(specs), &guard, secret_fd, cfg.recovery_in_memory);
    }
    std::vector<obs::LocalWorker> workers;
    for (const auto& s : group->specs())
      workers.push_back({int(s.global_rank), int(s.local_rank), group->pid(s.local_rank),
                         obs::AgentObserver::recorder_file(rank_dir(s))});
    observer.round_started({round.number, round.restart_count, round.group_world_size(), round.world_size()}, workers);
    struct RoundEnd {  // every way out of the round below
      obs::AgentObserver& o;
      ~RoundEnd() { o.round_ended(); }
    } round_end{observer};
    bool done_marked = false;
    std::optional<std::chrono::steady_clock::time_point> stall_deferred_since;
    for (;;) {
      if (int sig = signals_received()) {
        // Peers learn first, so that when every worker stops together at the next step (the
        // trainer checkpoints it) their agents take it for the end of the round, not a failure.
        try {
          rendezvous.end_round(round, str("node ", me.hostname, " (group rank ", round.group_rank, ") left on signal ", sig),
                               false, "", /*workers_alive=*/true);
        } catch (const Error& e) {
          log::warn(str("telling peers we leave: ", e.what()));
        }
        group->stop(signal_for_workers(sig), cfg.stop_timeout_s);
        return on_signal();
      }
      auto state = group->poll();
      rendezvous.heartbeat(round);
      observer.poll();
      if (state == WorkerGroup::State::Succeeded) {
        if (!done_marked) {
          rendezvous.mark_done(round);
          done_marked = true;
          if (round.group_world_size() > 1) log::info("workers of this node succeeded; waiting for the other nodes");
        }
        if (rendezvous.all_done(round)) {
          group->stop(SIGKILL, 0);  // leftovers of the workers' process groups
          rendezvous.mark_job_finished(round);
          observer.job_succeeded();
          log::info(str("all ", round.world_size(), " workers succeeded"));
          return leave(0, true);
        }
      }
      auto status = rendezvous.poll(round);
      // --recovery memory: workers that lost peers (or will gain some) are kept for the next round.
      auto keep_if_live = [&] {
        if (!cfg.recovery_in_memory || group->poll() != WorkerGroup::State::Running ||
            group_has_stopped_worker(*group))
          return false;
        kept = std::move(group);
        return true;
      };
      if (status.ended) {
        if (keep_if_live()) {
          log::info(str("round ", round.number, " ended: ", status.end_reason, "; workers kept for the next round"));
          if (!status.workers_alive) abort_round(*kept, round.number, status.end_reason);
          break;
        }
        // With every worker alive they stop gracefully (a checkpoint of the current step); after
        // a failure or a lost node they could only wait for the lost ranks: a short grace.
        log::info(str("round ", round.number, " ended: ", status.end_reason, "; stopping workers"));
        group->stop(SIGTERM, status.workers_alive ? cfg.stop_timeout_s : lost_peer_grace_s(cfg));
        break;
      }
      if (state == WorkerGroup::State::Failed) {
        // Stop first so the failed worker's stderr is fully read for the root cause.
        WorkerExit failed = *group->first_failure();
        log::error(str("worker rank ", failed.global_rank, " (local rank ", failed.local_rank, ", pid ", failed.pid,
                       ") failed with ", failed.describe(), "; stopping the group"));
        group->stop(SIGTERM, lost_peer_grace_s(cfg));  // the others cannot finish a step without it
        FailureContext context{me.hostname, round.group_rank, round.number, round.restart_count,
                               group->specs()[failed.local_rank].error_file_path};
        std::string failure = failure_to_json(failed, group->stderr_tail(failed.local_rank), context);
        rendezvous.end_round(round, str("rank ", failed.global_rank, " failed with ", failed.describe()), true, failure);
        break;
      }
      if (!status.dead.empty()) {
        const auto& node = round.nodes[status.dead.front()];
        std::string reason = str("node ", node.hostname, " (group rank ", status.dead.front(), ", agent pid ", node.pid,
                                 ") ", status.dead_why);
        log::warn(reason + "; re-forming the group");
        rendezvous.declare_dead(round, status.dead, status.dead_why);
        rendezvous.end_round(round, reason, false, "");
        if (keep_if_live()) {
          abort_round(*kept, round.number, reason);
          break;
        }
        group->stop(SIGTERM, lost_peer_grace_s(cfg));  // their collectives could only wait for the lost ranks
        break;
      }
      if (cfg.recovery_in_memory) {
        const std::string lost = lost_peer_report(*group, round.number);
        if (!lost.empty() && group->poll() == WorkerGroup::State::Running) {
          // A worker saw a peer go (a reset connection): no need to wait for a heartbeat deadline.
          log::warn(lost + "; re-forming the group");
          rendezvous.end_round(round, lost, false, "", /*workers_alive=*/true);
          kept = std::move(group);
          abort_round(*kept, round.number, lost);  // this node's other workers may still wait
          break;
        }
      }
      if (observer.restart_due() &&
          !stall_left_to_its_node(cfg, observer, "stall: " + observer.stall_reason(), &stall_deferred_since)) {
        // A hang is a failure like a crash: the group restarts from its last checkpoint within
        // --max-restarts (in memory: from its peers). The stuck rank cannot checkpoint (its peers
        // would wait for it): a short grace, none in memory. After the dead-node check: a silent
        // node, found the same poll, is a membership change that costs no restart.
        const std::string reason = "stall: " + observer.stall_reason();
        log::error(reason + (cfg.recovery_in_memory ? "; replacing this node's workers (--stall-action restart)"
                                                    : "; restarting the group (--stall-action restart)"));
        group->stop(cfg.recovery_in_memory ? SIGKILL : SIGTERM, cfg.recovery_in_memory ? 0 : lost_peer_grace_s(cfg));
        rendezvous.end_round(round, reason, true, stall_failure(observer, *group, reason, me.hostname, round));
        break;
      }
      if (status.waiting_nodes > 0 && !done_marked && round.group_world_size() < cfg.rendezvous.max_nodes) {
        std::string reason = str("scale-up: ", status.waiting_nodes, " node(s) waiting to join");
        // Round end first, then the graceful stop: every worker checkpoints the same step. In
        // memory, the workers re-form after the step they all agree on.
        rendezvous.end_round(round, reason, false, "", /*workers_alive=*/true);
        if (keep_if_live()) {
          log::info(reason + "; the live workers re-form with them");
          break;
        }
        log::info(reason + "; restarting the group");
        group->stop(SIGTERM, cfg.stop_timeout_s);
        break;
      }
      sleep_interruptibly(cfg.monitor_interval_s);
    }
  }
}

}  // namespace cadre::launch
