// `cadre run`'s launcher rules, from its flags as given to a running agent: what Slurm's
// environment fills in under srun, the checks every backend needs, etcd's own (lease TTL,
// credentials, TLS), --rdzv-conf, where the store lives, the job secret and the log directory.
// cli/cmd_run.cpp only parses the flags; docs/DESIGN.md ("Launcher and rendezvous", "etcd
// rendezvous") gives the reasons for each rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cadre::launch {

// The flags as given; the defaults are the ones the help text names.
struct RunFlags {
  std::string nnodes = "1";  // N or MIN:MAX
  std::string backend = "c10d";
  std::string endpoint, run_id = "none", rdzv_conf, log_dir, error_file, local_addr, secret_file;
  std::string metrics_addr = "127.0.0.1";
  std::string stall_action = "restart";  // dump | restart
  std::string recovery = "restart";      // restart | memory
  int64_t nproc = 1, max_restarts = 0, node_rank = -1, metrics_port = -1;
  double monitor_interval = 0.1, stop_timeout = 10, stall_timeout = 30;
  bool standalone = false;
  std::vector<std::string> program;  // non-empty: argv of the workers
  // Which of the flags Slurm's environment could fill in were given: those win over it.
  bool nnodes_given = false, node_rank_given = false, endpoint_given = false, run_id_given = false;
  // Hides a secret given on the command line (a password in --rdzv-conf) from `ps`.
  std::function<void(const std::string& secret)> hide_secret;
  // The run directory `cadre train ARGS` would write to ("" when none): its logs go there.
  std::function<std::string(const std::vector<std::string>& train_args)> train_run_dir;
};

// Applies the rules (ConfigError naming the flag for anything inconsistent), runs the agent
// until the job ends and returns its exit code (agent_run's). Reads the SLURM_*, CADRE_ETCD_*
// and job-secret variables, and removes those that could carry a secret from the environment
// the workers inherit.
int run_job(RunFlags flags);

}  // namespace cadre::launch
