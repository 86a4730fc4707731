// The elastic agent behind `cadre run`: one per node. Joins rendezvous rounds, starts this node's
// workers with torchrun's environment, supervises them, and restarts the whole group on a worker
// failure, a dead peer or a scale-up (with in-memory recovery, only the failed node's workers),
// until the workers succeed or --max-restarts is exhausted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "rdzv/rendezvous.h"
#include "rdzv/store_open.h"

namespace cadre::launch {

struct AgentConfig {
  rdzv::StoreOptions store;
  rdzv::RendezvousConfig rendezvous;
  int64_t nproc_per_node = 1;
  int64_t max_restarts = 0;
  double monitor_interval_s = 0.1;
  double stop_timeout_s = 10;   // grace between the forwarded signal and SIGKILL
  double exit_linger_s = 10;    // the store host waits this long for peers to leave
  std::string log_dir;          // per-rank logs: <log_dir>/round_<k>/rank_<R>/{stdout,stderr}.log
  std::string error_file;       // root-cause file written on give-up
  std::string local_addr;       // address peers reach this node at ("" = route towards the store)
  std::vector<std::string> program;  // argv; program[0] resolved
  // Observability (obs/agent_observer.h): /metrics on metrics_addr:metrics_port (-1: off, 0: any
  // free port), and the hang diagnosis after stall_timeout_s seconds stuck (0: off), after which
  // the group is restarted as after a worker failure when stall_restarts (--stall-action restart).
  std::string metrics_addr = "127.0.0.1";
  int64_t metrics_port = -1;
  double stall_timeout_s = 30;
  bool stall_restarts = true;
  // --recovery memory: workers whose peers were lost (another node's failure, a dead node, a
  // scale-up) are kept, not restarted, and told their place in the next round over their
  // membership channel (rdzv/membership.h); only the failed node's workers restart.
  bool recovery_in_memory = false;
  // The job secret (store/secret.h); store.secret is the same. Empty with etcd: the agents
  // then generate one and agree on it through etcd. Workers get it as CADRE_JOB_SECRET_FD.
  std::string secret;
};

// Runs the agent until the job ends; returns the exit code (0 success, 1 failure, 128+signal).
int agent_run(const AgentConfig& config);

}  // namespace cadre::launch
