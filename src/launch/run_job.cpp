// `cadre run`'s rules, in the order the flags are checked: Slurm fills in, the flags are
// checked, etcd's defaults and --rdzv-conf apply, then the store, the job secret and the logs.
#include "launch/run_job.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "core/error.h"
#include "core/log.h"
#include "launch/agent.h"
#include "launch/log_dir.h"
#include "launch/slurm.h"
#include "launch/worker_group.h"
#include "rdzv/etcd_client.h"
#include "store/secret.h"

namespace cadre::launch {
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

// One --rdzv-conf key that names a secret or a file: user, password, password_file, cacert,
// cert, key. False for the others (timeouts).
bool apply_rdzv_credential(const std::string& key, const std::string& value, const RunFlags& flags,
                           rdzv::StoreOptions& store) {
  if (key == "user" || key == "password") {
    CADRE_CONFIG_CHECK(!value.empty(), "--rdzv-conf ", key, " must not be empty");
    (key == "user" ? store.user : store.password) = value;
    if (key == "password") {
      if (flags.hide_secret) flags.hide_secret(value);  // gone from `ps` from now on; it was visible until here
      log::warn("--rdzv-conf password=... shows in `ps` while the agent starts: prefer password_file=FILE or "
                "CADRE_ETCD_PASSWORD");
    }
    return true;
  }
  if (key == "password_file") {
    std::ifstream in(value);
    CADRE_CONFIG_CHECK(in, "--rdzv-conf password_file=", value, ": cannot read it");
    std::getline(in, store.password);
    CADRE_CONFIG_CHECK(!store.password.empty(), "--rdzv-conf password_file=", value, ": the first line is empty");
    return true;
  }
  if (key == "cacert" || key == "cert" || key == "key") {
    CADRE_CONFIG_CHECK(std::filesystem::is_regular_file(value), "--rdzv-conf ", key, "=", value, ": no such file");
    (key == "cacert" ? store.ca_file : key == "cert" ? store.cert_file : store.key_file) = value;
    return true;
  }
  return false;
}

// One --rdzv-conf timeout, in seconds.
void apply_rdzv_timeout(const std::string& key, const std::string& value, AgentConfig& cfg) {
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

// --rdzv-conf key=value,key=value (timeouts in seconds; user, password and TLS files for etcd).
void apply_rdzv_conf(const RunFlags& flags, AgentConfig& cfg) {
  const std::string& text = flags.rdzv_conf;
  size_t start = 0;
  while (!text.empty() && start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    auto eq = item.find('=');
    CADRE_CONFIG_CHECK(eq != std::string::npos, "--rdzv-conf: expected key=value, got '", item, "'");
    std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (!apply_rdzv_credential(key, value, flags, cfg.store)) apply_rdzv_timeout(key, value, cfg);
  }
}

// Under srun, Slurm describes the job; flags given explicitly still win.
void apply_slurm(RunFlags& f) {
  auto slurm = slurm_launch_from_env([](const char* n) { return std::getenv(n); });
  if (!slurm) return;
  CADRE_CONFIG_CHECK(slurm->tasks_on_this_node == 1, "slurm: ", slurm->tasks_on_this_node,
                     " tasks on this node; run one `cadre run` per node (srun --ntasks-per-node=1)");
  if (!f.nnodes_given) f.nnodes = std::to_string(slurm->nnodes);
  if (!f.node_rank_given) f.node_rank = slurm->node_rank;
  if (!f.endpoint_given && f.backend != "etcd")  // etcd lives elsewhere: only the user knows where
    f.endpoint = slurm_node_address(slurm->first_host) + ":" + std::to_string(slurm->port);
  if (!f.run_id_given) f.run_id = "slurm-" + slurm->job_id;
  log::info(str("slurm job ", slurm->job_id, ": node ", f.node_rank, " of ", f.nnodes, ", rendezvous at ", f.endpoint));
}

// The checks that need no backend knowledge beyond static's fixed membership.
void check_flags(RunFlags& f, int64_t min_nodes, int64_t max_nodes) {
  CADRE_CONFIG_CHECK(f.nproc >= 1, "--nproc-per-node must be at least 1, got ", f.nproc);
  CADRE_CONFIG_CHECK(f.max_restarts >= 0, "--max-restarts must be >= 0, got ", f.max_restarts);
  CADRE_CONFIG_CHECK(f.monitor_interval > 0, "--monitor-interval must be > 0, got ", f.monitor_interval);
  CADRE_CONFIG_CHECK(f.stop_timeout >= 0, "--stop-timeout must be >= 0, got ", f.stop_timeout);
  CADRE_CONFIG_CHECK(f.metrics_port >= -1 && f.metrics_port <= 65535, "--metrics-port must be a port in 0..65535, got ",
                     f.metrics_port);
  CADRE_CONFIG_CHECK(f.stall_timeout >= 0, "--stall-timeout must be >= 0 seconds, got ", f.stall_timeout);
  CADRE_CONFIG_CHECK(f.stall_action == "dump" || f.stall_action == "restart",
                     "--stall-action must be dump or restart, got '", f.stall_action, "'");
  CADRE_CONFIG_CHECK(f.recovery == "restart" || f.recovery == "memory", "--recovery must be restart or memory, got '",
                     f.recovery, "'");
  CADRE_CONFIG_CHECK(f.backend == "c10d" || f.backend == "static" || f.backend == "etcd",
                     "--rdzv-backend must be c10d, static or etcd, got '", f.backend, "'");
  CADRE_CONFIG_CHECK(!(f.backend == "etcd" && f.standalone), "--standalone hosts the embedded store; it cannot be "
                     "combined with --rdzv-backend etcd");
  CADRE_CONFIG_CHECK(f.node_rank < max_nodes, "--node-rank ", f.node_rank, " must be below the node count ", max_nodes);
  if (f.backend == "static") {
    CADRE_CONFIG_CHECK(min_nodes == max_nodes, "--rdzv-backend static needs a fixed --nnodes, got ", f.nnodes);
    if (f.node_rank < 0 && max_nodes == 1) f.node_rank = 0;
    CADRE_CONFIG_CHECK(f.node_rank >= 0, "--rdzv-backend static needs --node-rank");
  }
}

// etcd's defaults, before --rdzv-conf: liveness comes from the session lease, a few seconds
// rather than the 30 s of heartbeat counters; credentials may come from the environment.
void etcd_defaults(AgentConfig& cfg) {
  cfg.rendezvous.heartbeat_timeout_s = 5;
  if (const char* user = std::getenv("CADRE_ETCD_USER")) cfg.store.user = user;
  if (const char* password = std::getenv("CADRE_ETCD_PASSWORD")) cfg.store.password = password;
}

// After --rdzv-conf: what etcd needs of it, and that the other backends got none of it.
void check_backend_conf(const RunFlags& f, AgentConfig& cfg) {
  if (f.backend != "etcd") {
    CADRE_CONFIG_CHECK(cfg.store.user.empty() && cfg.store.password.empty() && cfg.store.ca_file.empty() &&
                       cfg.store.cert_file.empty(), "--rdzv-conf user/password/cacert/cert/key only apply to "
                       "--rdzv-backend etcd");
    return;
  }
  CADRE_CONFIG_CHECK(cfg.rendezvous.heartbeat_timeout_s >= 2, "--rdzv-conf heartbeat_timeout (the etcd lease TTL) "
                     "must be at least 2 s (etcd's minimum lease TTL), got ", cfg.rendezvous.heartbeat_timeout_s);
  CADRE_CONFIG_CHECK(cfg.store.user.empty() == cfg.store.password.empty(),
                     "etcd authentication needs both user and password (--rdzv-conf user=..,password=..)");
  CADRE_CONFIG_CHECK(cfg.store.cert_file.empty() == cfg.store.key_file.empty(),
                     "an etcd TLS client certificate needs both --rdzv-conf cert=.. and key=..");
  cfg.store.session_ttl_s = cfg.rendezvous.heartbeat_timeout_s;
  if (!f.run_id_given && f.run_id == "none")
    log::warn("--rdzv-id not given: every job on this etcd without one shares the id 'none' (and its rounds)");
}

// Where the store lives: etcd's endpoints, or the embedded store's host (standalone: here).
void store_location(const RunFlags& f, int64_t max_nodes, rdzv::StoreOptions& store) {
  store.backend = f.backend;
  store.node_rank = f.node_rank;
  store.standalone = f.backend != "etcd" && (f.standalone || (f.endpoint.empty() && max_nodes == 1));
  if (f.backend == "etcd") {
    store.endpoints = rdzv::etcd_endpoints_parse(f.endpoint.empty() ? "127.0.0.1:2379" : f.endpoint, &store.tls);
    CADRE_CONFIG_CHECK(store.tls || (store.ca_file.empty() && store.cert_file.empty()),
                       "--rdzv-conf cacert/cert/key need https:// etcd endpoints, got '", f.endpoint, "'");
    store.endpoint = store.endpoints.front();
  } else if (!f.endpoint.empty()) {
    store.endpoint = rdzv::endpoint_parse(f.endpoint, 29500);
  }
}

bool loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

// What crosses the network to a plain http:// etcd in clear text (known once the endpoints are
// parsed): its credentials are warned about; a job secret agreed on through it is refused, since
// whoever reads it can join the job's stores — unless every endpoint is this machine's loopback.
void check_etcd_transport(const rdzv::StoreOptions& store, const std::string& secret) {
  if (store.backend != "etcd" || store.tls) return;
  if (!store.user.empty())
    log::warn("etcd credentials go over plain http: anyone on the network path can read the password and the "
              "token; use https:// endpoints (--rdzv-conf cacert=CA.pem)");
  if (!secret.empty()) return;
  for (const auto& e : store.endpoints)
    CADRE_CONFIG_CHECK(loopback_host(e.host), "the job secret would be agreed on through etcd at http://", e.str(),
                       " in clear text, and whoever reads it can join this job's stores: use https:// etcd "
                       "endpoints (--rdzv-conf cacert=CA.pem), or give every node the same secret "
                       "(--job-secret-file FILE, or CADRE_JOB_SECRET_FILE)");
}

// The job secret: given, generated for one node, or (etcd) agreed on through etcd. The
// variables that could carry it (or etcd's password) are not passed on to the workers.
std::string job_secret(const RunFlags& f, int64_t max_nodes) {
  std::optional<std::string> secret =
      f.secret_file.empty() ? store::job_secret_from_environment() : store::job_secret_read_file(f.secret_file);
  for (const char* name : {store::kSecretEnv, store::kSecretFileEnv, store::kSecretFdEnv, "CADRE_ETCD_PASSWORD"})
    ::unsetenv(name);
  if (secret) return *secret;
  if (max_nodes == 1) return store::job_secret_generate();
  CADRE_CONFIG_CHECK(f.backend == "etcd", "a job of up to ", max_nodes, " nodes with --rdzv-backend ", f.backend,
                     " needs a job secret shared by every node, which authenticates every connection to its "
                     "stores: --job-secret-file FILE, or CADRE_JOB_SECRET_FILE / CADRE_JOB_SECRET (make one with "
                     "`openssl rand -hex 32 > FILE && chmod 600 FILE`)");
  return "";
}

// A `cadre train` worker has a run directory: its logs belong there. Anything else gets a
// temporary directory, removed after success and rotated after failures. Returns whether the
// directory is a temporary one.
bool choose_log_dir(const RunFlags& f, AgentConfig& cfg) {
  bool temporary = false;
  std::string log_dir = f.log_dir;
  if (log_dir.empty()) {
    const auto& program = cfg.program;
    const bool cadre_train = program.size() > 1 && program[1] == "train" &&
                             std::filesystem::path(program[0]).filename() == "cadre";
    const std::string run_dir =
        cadre_train && f.train_run_dir ? f.train_run_dir(std::vector<std::string>(program.begin() + 2, program.end())) : "";
    if (!run_dir.empty()) {
      log_dir = (std::filesystem::path(run_dir) / "logs").string();
    } else {
      log_dir = temp_log_dir_create();
      temporary = true;
    }
  }
  std::filesystem::create_directories(log_dir);
  cfg.log_dir = log_dir;
  cfg.error_file = f.error_file.empty() ? log_dir + "/error.json" : f.error_file;
  return temporary;
}

void copy_agent_flags(const RunFlags& f, int64_t min_nodes, int64_t max_nodes, AgentConfig& cfg) {
  cfg.store.secret = cfg.secret;
  cfg.rendezvous.run_id = f.run_id;
  cfg.rendezvous.min_nodes = min_nodes;
  cfg.rendezvous.max_nodes = max_nodes;
  cfg.rendezvous.rank_by_node_rank = f.backend == "static";
  cfg.nproc_per_node = f.nproc;
  cfg.max_restarts = f.max_restarts;
  cfg.monitor_interval_s = f.monitor_interval;
  cfg.stop_timeout_s = f.stop_timeout;
  cfg.local_addr = f.local_addr;
  cfg.metrics_addr = f.metrics_addr;
  cfg.metrics_port = f.metrics_port;
  cfg.stall_timeout_s = f.stall_timeout;
  cfg.stall_restarts = f.stall_action == "restart";
  cfg.recovery_in_memory = f.recovery == "memory";
  cfg.program = f.program;
  cfg.program[0] = program_resolve(cfg.program[0]);
}

}  // namespace

int run_job(RunFlags f) {
  CADRE_CHECK(!f.program.empty(), "cadre run: no program given");
  AgentConfig cfg;
  apply_slurm(f);
  auto [min_nodes, max_nodes] = parse_nnodes(f.nnodes);
  check_flags(f, min_nodes, max_nodes);
  if (f.backend == "etcd") etcd_defaults(cfg);
  apply_rdzv_conf(f, cfg);
  check_backend_conf(f, cfg);
  store_location(f, max_nodes, cfg.store);
  cfg.secret = job_secret(f, max_nodes);
  check_etcd_transport(cfg.store, cfg.secret);
  copy_agent_flags(f, min_nodes, max_nodes, cfg);
  const bool temporary_logs = choose_log_dir(f, cfg);
  log::info(str("cadre run: ", min_nodes == max_nodes ? std::to_string(max_nodes) : f.nnodes, " node(s) x ", f.nproc,
                " worker(s), run id ", f.run_id, ", logs in ", cfg.log_dir,
                temporary_logs ? " (removed if the job succeeds)" : ""));
  const int code = agent_run(cfg);
  if (code == 0 && temporary_logs) temp_log_dir_remove(cfg.log_dir);
  return code;
}

}  // namespace cadre::launch
