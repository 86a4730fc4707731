// `cadre run`: torchrun-compatible flags, handed to the launcher (launch/run_job.h), which
// applies its rules (Slurm's environment under srun, the rendezvous backends, the job secret,
// the log directory) and runs the agent (launch/agent.cpp).
#include <cstdlib>
#include <utility>

#include "cli/argv_scrub.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/log.h"
#include "launch/exit_code_file.h"
#include "launch/run_job.h"

namespace cadre {

namespace {

// run_job's exit code, also written to --exit-code-file (when given) however the agent ends:
// 2 for bad input it finds (ConfigError), 1 for any other error. A file that cannot be written
// is logged; the agent's own exit code and error stay what they were.
int run_job_recording_exit(launch::RunFlags f, const std::string& exit_code_file) {
  if (exit_code_file.empty()) return launch::run_job(std::move(f));
  const std::string path = launch::exit_code_file_path(exit_code_file, f.node_rank_given ? f.node_rank : -1,
                                                       [](const char* n) { return std::getenv(n); });
  auto record = [&](int code) {
    try {
      launch::exit_code_file_write(path, code);
    } catch (const Error& e) {
      log::error(e.what());
    }
  };
  int code = 1;
  try {
    code = launch::run_job(std::move(f));
  } catch (const ConfigError&) {
    record(2);
    throw;
  } catch (...) {
    record(1);
    throw;
  }
  record(code);
  return code;
}

}  // namespace

int cmd_run(const Args& args) {
  launch::RunFlags f;
  std::string exit_code_file;
  Flags flags("cadre run [flags] -- PROGRAM ARGS...   (torchrun-compatible elastic launcher)");
  flags.add("--nnodes", &f.nnodes, "number of nodes, N or MIN:MAX (default 1)");
  flags.add("--nproc-per-node", &f.nproc, "workers per node (default 1)");
  flags.add("--rdzv-backend", &f.backend,
            "c10d (embedded store, elastic), static, or etcd (external etcd v3 cluster; default c10d)");
  flags.add("--rdzv-endpoint", &f.endpoint,
            "host:port of the rendezvous store (default 127.0.0.1:29500); etcd: [https://]host:port[,...] "
            "(default 127.0.0.1:2379)");
  flags.add("--rdzv-id", &f.run_id, "job id shared by all nodes (default none)");
  flags.add("--rdzv-conf", &f.rdzv_conf,
            "join_timeout=600,last_call_timeout=30,heartbeat_timeout=30,store_timeout=60,exit_linger=10 (seconds); "
            "etcd: heartbeat_timeout (alias session_ttl) is the lease TTL, default 5; user=..,password=.. "
            "(or password_file=FILE, or env CADRE_ETCD_USER, CADRE_ETCD_PASSWORD; a password here shows in `ps` "
            "until the agent starts); https endpoints: cacert=FILE[,cert=FILE,key=FILE]");
  flags.add("--standalone", &f.standalone, "single node: host the store on a free local port");
  flags.add("--max-restarts", &f.max_restarts, "group restarts allowed after worker failures (default 0)");
  flags.add("--monitor-interval", &f.monitor_interval, "seconds between worker checks and heartbeats (default 0.1)");
  flags.add("--stop-timeout", &f.stop_timeout, "seconds between SIGTERM and SIGKILL when stopping workers (default 10)");
  flags.add("--node-rank", &f.node_rank, "this node's rank (static backend; optional for c10d)");
  flags.add("--log-dir", &f.log_dir, "directory for per-rank logs and the error file (default: <run.dir>/logs for "
            "`cadre train`, else a temporary directory removed after success)");
  flags.add("--error-file", &f.error_file, "root-cause file written on give-up (default <log-dir>/error.json)");
  flags.add("--local-addr", &f.local_addr, "address other nodes reach this node at (default: route to the store)");
  flags.add("--metrics-port", &f.metrics_port,
            "serve Prometheus metrics of this node's workers at http://ADDR:PORT/metrics (0: any free port; "
            "default off)");
  flags.add("--metrics-addr", &f.metrics_addr, "address /metrics listens on (default 127.0.0.1; 0.0.0.0 for all)");
  flags.add("--stall-timeout", &f.stall_timeout,
            "seconds a worker may go without collective activity (stuck in one, or starting none) before the "
            "agent dumps the flight recorders and names the rank the others wait for (default 30; 0: off)");
  flags.add("--stall-action", &f.stall_action,
            "what follows a stall's dumps: restart (stop the group and restart it from its last checkpoint, as "
            "after a crash, counted against --max-restarts; default) or dump (only the dumps and the diagnosis)");
  flags.add("--recovery", &f.recovery,
            "after a lost node or worker: restart (every worker restarts from the last checkpoint on disk; "
            "default) or memory (live workers are not restarted: they re-form the group and go on from the "
            "current step, newcomers take the state from a live rank over the network; `cadre train` with "
            "parallel.strategy NO_SHARD)");
  flags.add("--job-secret-file", &f.secret_file,
            "file holding the secret that every store connection must prove (the same on every node; default: "
            "env CADRE_JOB_SECRET_FILE or CADRE_JOB_SECRET; generated for single-node jobs, and with etcd)");
  flags.add("--exit-code-file", &exit_code_file,
            "write this agent's exit code there when it ends (for batch scripts; %n becomes the node's id in the "
            "Slurm job, else --node-rank, else the hostname)");
  f.program = flags.parse(args);
  CADRE_CONFIG_CHECK(!f.program.empty(), "no program given\n", flags.usage());
  f.nnodes_given = flags.given("--nnodes");
  f.node_rank_given = flags.given("--node-rank");
  f.endpoint_given = flags.given("--rdzv-endpoint");
  f.run_id_given = flags.given("--rdzv-id");
  f.hide_secret = argv_hide;
  f.train_run_dir = train_run_dir;
  return run_job_recording_exit(std::move(f), exit_code_file);
}

}  // namespace cadre
