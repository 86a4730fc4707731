// `cadre run`: torchrun-compatible flags -> AgentConfig, with Slurm's environment filling in the
// node count, node rank, endpoint and run id under srun. The agent itself is launch/agent.cpp.
#include <cstdlib>
#include <optional>
#include <filesystem>
#include <fstream>

#include "cli/argv_scrub.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "core/error.h"
#include "core/log.h"
#include "launch/agent.h"
#include "launch/log_dir.h"
#include "launch/slurm.h"
#include "launch/worker_group.h"
#include "rdzv/etcd_client.h"
#include "store/secret.h"

namespace cadre {
namespace {

int64_t parse_positive(const std::string& text, const std::string& what) {
  size_t used = 0;
  int64_t v = 0;
  try { v = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
  CADRE_CONFIG_CHECK(used == text.size() && !text.empty() && v >= 1, what, " must be a positive integer, got '", text, "'");
  return v;
}

// "N" or "MIN:MAX".
std::pair<int64_t, int64_t> parse_nnodes(const std::string& text) {
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int64_t n = parse_positive(text, "--nnodes");
    return {n, n};
  }
  int64_t lo = parse_positive(text.substr(0, colon), "--nnodes MIN"), hi = parse_positive(text.substr(colon + 1), "--nnodes MAX");
  CADRE_CONFIG_CHECK(lo <= hi, "--nnodes ", text, ": MIN must not exceed MAX");
  return {lo, hi};
}

// --rdzv-conf key=value,key=value (timeouts in seconds; user and password for etcd).
void apply_rdzv_conf(const std::string& text, launch::AgentConfig& cfg) {
  size_t start = 0;
  while (!text.empty() && start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    auto eq = item.find('=');
    CADRE_CONFIG_CHECK(eq != std::string::npos, "--rdzv-conf: expected key=value, got '", item, "'");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "user" || key == "password") {
      CADRE_CONFIG_CHECK(!value.empty(), "--rdzv-conf ", key, " must not be empty");
      (key == "user" ? cfg.store.user : cfg.store.password) = value;
      if (key == "password") {
        argv_hide(value);  // gone from `ps` from now on; it was visible until here
        log::warn("--rdzv-conf password=... shows in `ps` while the agent starts: prefer password_file=FILE or "
                  "CADRE_ETCD_PASSWORD");
      }
      continue;
    }
    if (key == "password_file") {
      std::ifstream in(value);
      CADRE_CONFIG_CHECK(in, "--rdzv-conf password_file=", value, ": cannot read it");
      std::getline(in, cfg.store.password);
      CADRE_CONFIG_CHECK(!cfg.store.password.empty(), "--rdzv-conf password_file=", value, ": the first line is empty");
      continue;
    }
    if (key == "cacert" || key == "cert" || key == "key") {
      CADRE_CONFIG_CHECK(std::filesystem::is_regular_file(value), "--rdzv-conf ", key, "=", value,
                         ": no such file");
      (key == "cacert" ? cfg.store.ca_file : key == "cert" ? cfg.store.cert_file : cfg.store.key_file) = value;
      continue;
    }
    size_t used = 0;
    double v = -1;
    try { v = std::stod(value, &used); } catch (const std::exception&) { used = 0; }
    CADRE_CONFIG_CHECK(used == value.size() && !value.empty() && v > 0, "--rdzv-conf ", key,
                       " must be a positive number of seconds, got '", value, "'");
    if (key == "join_timeout") cfg.rendezvous.join_timeout_s = v;
    else if (key == "last_call_timeout") cfg.rendezvous.last_call_timeout_s = v;
    else if (key == "heartbeat_timeout") cfg.rendezvous.heartbeat_timeout_s = v;
    else if (key == "session_ttl") cfg.rendezvous.heartbeat_timeout_s = v;  // etcd's name for the same
    else if (key == "store_timeout") cfg.store.timeout_s = v;
    else if (key == "exit_linger") cfg.exit_linger_s = v;
    else
      throw ConfigError(str("--rdzv-conf: unknown key '", key,
                            "' (known: join_timeout, last_call_timeout, heartbeat_timeout, store_timeout, exit_linger, "
                            "session_ttl, user, password, password_file, cacert, cert, key)"));
  }
}

}  // namespace

int cmd_run(const Args& args) {
  std::string nnodes = "1", backend = "c10d", endpoint, run_id = "none", rdzv_conf, log_dir, error_file, local_addr,
              secret_file;
  std::string metrics_addr = "127.0.0.1";
  int64_t nproc = 1, max_restarts = 0, node_rank = -1, metrics_port = -1;
  double monitor_interval = 0.1, stop_timeout = 10, stall_timeout = 30;
  bool standalone = false;
  Flags flags("cadre run [flags] -- PROGRAM ARGS...   (torchrun-compatible elastic launcher)");
  flags.add("--nnodes", &nnodes, "number of nodes, N or MIN:MAX (default 1)");
  flags.add("--nproc-per-node", &nproc, "workers per node (default 1)");
  flags.add("--rdzv-backend", &backend,
            "c10d (embedded store, elastic), static, or etcd (external etcd v3 cluster; default c10d)");
  flags.add("--rdzv-endpoint", &endpoint,
            "host:port of the rendezvous store (default 127.0.0.1:29500); etcd: [https://]host:port[,...] "
            "(default 127.0.0.1:2379)");
  flags.add("--rdzv-id", &run_id, "job id shared by all nodes (default none)");
  flags.add("--rdzv-conf", &rdzv_conf,
            "join_timeout=600,last_call_timeout=30,heartbeat_timeout=30,store_timeout=60,exit_linger=10 (seconds); "
            "etcd: heartbeat_timeout (alias session_ttl) is the lease TTL, default 5; user=..,password=.. "
            "(or password_file=FILE, or env CADRE_ETCD_USER, CADRE_ETCD_PASSWORD; a password here shows in `ps` "
            "until the agent starts); https endpoints: cacert=FILE[,cert=FILE,key=FILE]");
  flags.add("--standalone", &standalone, "single node: host the store on a free local port");
  flags.add("--max-restarts", &max_restarts, "group restarts allowed after worker failures (default 0)");
  flags.add("--monitor-interval", &monitor_interval, "seconds between worker checks and heartbeats (default 0.1)");
  flags.add("--stop-timeout", &stop_timeout, "seconds between SIGTERM and SIGKILL when stopping workers (default 10)");
  flags.add("--node-rank", &node_rank, "this node's rank (static backend; optional for c10d)");
  flags.add("--log-dir", &log_dir, "directory for per-rank logs and the error file (default: <run.dir>/logs for "
            "`cadre train`, else a temporary directory removed after success)");
  flags.add("--error-file", &error_file, "root-cause file written on give-up (default <log-dir>/error.json)");
  flags.add("--local-addr", &local_addr, "address other nodes reach this node at (default: route to the store)");
  flags.add("--metrics-port", &metrics_port,
            "serve Prometheus metrics of this node's workers at http://ADDR:PORT/metrics (0: any free port; "
            "default off)");
  flags.add("--metrics-addr", &metrics_addr, "address /metrics listens on (default 127.0.0.1; 0.0.0.0 for all)");
  flags.add("--stall-timeout", &stall_timeout,
            "seconds a worker may go without collective activity (stuck in one, or starting none) before the "
            "agent dumps the flight recorders and names the rank the others wait for (default 30; 0: off)");
  flags.add("--job-secret-file", &secret_file,
            "file holding the secret that every store connection must prove (the same on every node; default: "
            "env CADRE_JOB_SECRET_FILE or CADRE_JOB_SECRET; generated for single-node jobs, and with etcd)");
  std::vector<std::string> program = flags.parse(args);

  CADRE_CONFIG_CHECK(!program.empty(), "no program given\n", flags.usage());
  launch::AgentConfig cfg;
  // Under srun, Slurm describes the job; flags given explicitly still win.
  if (auto slurm = launch::slurm_launch_from_env([](const char* n) { return std::getenv(n); })) {
    CADRE_CONFIG_CHECK(slurm->tasks_on_this_node == 1, "slurm: ", slurm->tasks_on_this_node,
                       " tasks on this node; run one `cadre run` per node (srun --ntasks-per-node=1)");
    if (!flags.given("--nnodes")) nnodes = std::to_string(slurm->nnodes);
    if (!flags.given("--node-rank")) node_rank = slurm->node_rank;
    if (!flags.given("--rdzv-endpoint") && backend != "etcd")  // etcd lives elsewhere: only the user knows where
      endpoint = launch::slurm_node_address(slurm->first_host) + ":" + std::to_string(slurm->port);
    if (!flags.given("--rdzv-id")) run_id = "slurm-" + slurm->job_id;
    log::info(str("slurm job ", slurm->job_id, ": node ", node_rank, " of ", nnodes, ", rendezvous at ", endpoint));
  }
  auto [min_nodes, max_nodes] = parse_nnodes(nnodes);
  CADRE_CONFIG_CHECK(nproc >= 1, "--nproc-per-node must be at least 1, got ", nproc);
  CADRE_CONFIG_CHECK(max_restarts >= 0, "--max-restarts must be >= 0, got ", max_restarts);
  CADRE_CONFIG_CHECK(monitor_interval > 0, "--monitor-interval must be > 0, got ", monitor_interval);
  CADRE_CONFIG_CHECK(stop_timeout >= 0, "--stop-timeout must be >= 0, got ", stop_timeout);
  CADRE_CONFIG_CHECK(metrics_port >= -1 && metrics_port <= 65535, "--metrics-port must be a port in 0..65535, got ",
                     metrics_port);
  CADRE_CONFIG_CHECK(stall_timeout >= 0, "--stall-timeout must be >= 0 seconds, got ", stall_timeout);
  CADRE_CONFIG_CHECK(backend == "c10d" || backend == "static" || backend == "etcd",
                     "--rdzv-backend must be c10d, static or etcd, got '", backend, "'");
  CADRE_CONFIG_CHECK(!(backend == "etcd" && standalone), "--standalone hosts the embedded store; it cannot be "
                     "combined with --rdzv-backend etcd");
  CADRE_CONFIG_CHECK(node_rank < max_nodes, "--node-rank ", node_rank, " must be below the node count ", max_nodes);
  if (backend == "static") {
    CADRE_CONFIG_CHECK(min_nodes == max_nodes, "--rdzv-backend static needs a fixed --nnodes, got ", nnodes);
    if (node_rank < 0 && max_nodes == 1) node_rank = 0;
    CADRE_CONFIG_CHECK(node_rank >= 0, "--rdzv-backend static needs --node-rank");
  }
  if (backend == "etcd") {
    // Liveness comes from the session lease: a few seconds, not the 30 s of heartbeat counters.
    cfg.rendezvous.heartbeat_timeout_s = 5;
    if (const char* user = std::getenv("CADRE_ETCD_USER")) cfg.store.user = user;
    if (const char* password = std::getenv("CADRE_ETCD_PASSWORD")) cfg.store.password = password;
  }
  apply_rdzv_conf(rdzv_conf, cfg);
  if (backend == "etcd") {
    CADRE_CONFIG_CHECK(cfg.rendezvous.heartbeat_timeout_s >= 2, "--rdzv-conf heartbeat_timeout (the etcd lease TTL) "
                       "must be at least 2 s (etcd's minimum lease TTL), got ", cfg.rendezvous.heartbeat_timeout_s);
    CADRE_CONFIG_CHECK(cfg.store.user.empty() == cfg.store.password.empty(),
                       "etcd authentication needs both user and password (--rdzv-conf user=..,password=..)");
    CADRE_CONFIG_CHECK(cfg.store.cert_file.empty() == cfg.store.key_file.empty(),
                       "an etcd TLS client certificate needs both --rdzv-conf cert=.. and key=..");
    cfg.store.session_ttl_s = cfg.rendezvous.heartbeat_timeout_s;
    if (!cfg.store.user.empty() && !cfg.store.tls)
      log::warn("etcd credentials go over plain http: anyone on the network path can read the password and the "
                "token; use https:// endpoints (--rdzv-conf cacert=CA.pem)");
    if (!flags.given("--rdzv-id") && run_id == "none")
      log::warn("--rdzv-id not given: every job on this etcd without one shares the id 'none' (and its rounds)");
  } else {
    CADRE_CONFIG_CHECK(cfg.store.user.empty() && cfg.store.password.empty() && cfg.store.ca_file.empty() &&
                       cfg.store.cert_file.empty(), "--rdzv-conf user/password/cacert/cert/key only apply to "
                       "--rdzv-backend etcd");
  }

  cfg.store.backend = backend;
  cfg.store.node_rank = node_rank;
  cfg.store.standalone = backend != "etcd" && (standalone || (endpoint.empty() && max_nodes == 1));
  if (backend == "etcd") {
    cfg.store.endpoints = rdzv::etcd_endpoints_parse(endpoint.empty() ? "127.0.0.1:2379" : endpoint, &cfg.store.tls);
    CADRE_CONFIG_CHECK(cfg.store.tls || (cfg.store.ca_file.empty() && cfg.store.cert_file.empty()),
                       "--rdzv-conf cacert/cert/key need https:// etcd endpoints, got '", endpoint, "'");
    cfg.store.endpoint = cfg.store.endpoints.front();
  } else if (!endpoint.empty()) {
    cfg.store.endpoint = rdzv::endpoint_parse(endpoint, 29500);
  }
  // The job secret: given, generated for one node, or (etcd) agreed on through etcd. The
  // variables that could carry it (or etcd's password) are not passed on to the workers.
  std::optional<std::string> secret =
      secret_file.empty() ? store::job_secret_from_environment() : store::job_secret_read_file(secret_file);
  for (const char* name : {store::kSecretEnv, store::kSecretFileEnv, store::kSecretFdEnv, "CADRE_ETCD_PASSWORD"})
    ::unsetenv(name);
  if (secret) {
    cfg.secret = *secret;
  } else if (max_nodes == 1) {
    cfg.secret = store::job_secret_generate();
  } else {
    CADRE_CONFIG_CHECK(backend == "etcd", "a job of up to ", max_nodes, " nodes with --rdzv-backend ", backend,
                       " needs a job secret shared by every node, which authenticates every connection to its "
                       "stores: --job-secret-file FILE, or CADRE_JOB_SECRET_FILE / CADRE_JOB_SECRET (make one with "
                       "`openssl rand -hex 32 > FILE && chmod 600 FILE`)");
  }
  cfg.store.secret = cfg.secret;
  cfg.rendezvous.run_id = run_id;
  cfg.rendezvous.min_nodes = min_nodes;
  cfg.rendezvous.max_nodes = max_nodes;
  cfg.rendezvous.rank_by_node_rank = backend == "static";
  cfg.nproc_per_node = nproc;
  cfg.max_restarts = max_restarts;
  cfg.monitor_interval_s = monitor_interval;
  cfg.stop_timeout_s = stop_timeout;
  cfg.local_addr = local_addr;
  cfg.metrics_addr = metrics_addr;
  cfg.metrics_port = metrics_port;
  cfg.stall_timeout_s = stall_timeout;
  program[0] = launch::program_resolve(program[0]);
  cfg.program = program;
  bool temporary_logs = false;
  if (log_dir.empty()) {
    // A `cadre train` worker has a run directory: its logs belong there. Anything else gets a
    // temporary directory, removed after success and rotated after failures.
    const bool cadre_train = program.size() > 1 && program[1] == "train" &&
                             std::filesystem::path(program[0]).filename() == "cadre";
    const std::string run_dir = cadre_train ? train_run_dir(Args(program.begin() + 2, program.end())) : "";
    if (!run_dir.empty()) {
      log_dir = (std::filesystem::path(run_dir) / "logs").string();
    } else {
      log_dir = launch::temp_log_dir_create();
      temporary_logs = true;
    }
  }
  std::filesystem::create_directories(log_dir);
  cfg.log_dir = log_dir;
  cfg.error_file = error_file.empty() ? log_dir + "/error.json" : error_file;
  log::info(str("cadre run: ", min_nodes == max_nodes ? std::to_string(max_nodes) : nnodes, " node(s) x ", nproc,
                " worker(s), run id ", run_id, ", logs in ", log_dir, temporary_logs ? " (removed if the job succeeds)" : ""));
  const int code = launch::agent_run(cfg);
  if (code == 0 && temporary_logs) launch::temp_log_dir_remove(log_dir);
  return code;
}

}  // namespace cadre
