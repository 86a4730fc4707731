// Deploy options (one table for the config section, the flags and --help) and the checks that
// turn a training config plus options into a DeploySpec.
#include "deploy/job_spec.h"

#include <unistd.h>

#include <algorithm>

#include <filesystem>
#include <random>
#include <regex>

#include "core/error.h"
#include "core/log.h"
#include "core/strategy.h"

namespace cadre::deploy {
namespace fs = std::filesystem;

const std::vector<DeployOption>& deploy_options() {
  static const std::vector<DeployOption> options = {
      {"name", "", "job name, a DNS-1035 label of at most 40 characters (default: cadre-<basename of run.dir>)", true, true},
      {"nodes", "1", "nodes, N or MIN:MAX (elastic: the job runs on any count in the range)", true, true},
      {"nproc_per_node", "1", "workers per node", true, true},
      {"max_restarts", "3", "worker-group restarts `cadre run` allows (Kubernetes: also the pods' retry budget)", true, true},
      {"image", "", "container image with cadre (see Dockerfile); required for Kubernetes", true, false},
      {"api", "trainjob", "trainjob (Kubeflow Trainer v2: TrainJob + TrainingRuntime) or pytorchjob (kubeflow.org/v1)", true, false},
      {"namespace", "default", "Kubernetes namespace", true, false},
      {"cpu", "", "CPU per node (request = limit), a Kubernetes quantity such as 8", true, true},
      {"memory", "", "memory per node (request = limit), such as 32Gi", true, true},
      {"gpus", "", "nvidia.com/gpu per node (default: nproc_per_node when train.device is cuda, else 0)", true, true},
      {"efa", "0", "vpc.amazonaws.com/efa devices per node (AWS Elastic Fabric Adapter)", true, false},
      {"shm_size", "1Gi", "size of the in-memory /dev/shm", true, false},
      {"volume_claim", "", "existing PersistentVolumeClaim for data, runs and checkpoints (default: write <name>-data)", true, false},
      {"volume_size", "100Gi", "size of the claim written when volume_claim is empty", true, false},
      {"storage_class", "", "storage class of that claim (it must offer ReadWriteMany)", true, false},
      {"mount_path", "/workspace", "where the shared volume is mounted; the working directory, so relative config paths land on it", true, false},
      {"metrics_port", "9464", "port of each node's /metrics for Prometheus (Kubernetes: the pods' scrape annotations; "
       "Slurm: on every address of the node, 0 for any free port, each node's URL in its log)", true, true},
      {"grace_period", "120", "seconds between SIGTERM and SIGKILL for a pod; workers checkpoint in that time", true, false},
      {"etcd_image", "quay.io/coreos/etcd:v3.5.17", "image of the 3-member etcd StatefulSet", true, false},
      {"dcgm_exporter_image", "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04",
       "image of the dcgm-exporter DaemonSet on the GPU nodes (written when train.device is cuda)", true, false},
      {"rdzv_id", "", "rendezvous id (default: <name>-<8 random hex digits>, unique per deployment)", true, false},
      {"partition", "", "Slurm partition (default: the cluster's default)", false, true},
      {"time", "", "Slurm time limit (MM, HH:MM:SS, D-HH:MM, ...); default: the partition's", false, true},
      {"signal_before", "120", "seconds before the time limit at which the job checkpoints and requeues itself", false, true},
      {"max_requeues", "5", "times the job requeues itself after a failure or a time limit", false, true},
      {"cadre", "", "absolute path of cadre on the nodes (default: this binary)", false, true},
      {"workdir", "", "directory the job starts in; relative config paths start there (default: the current one)", false, true},
  };
  return options;
}

std::string deploy_flag_name(const DeployOption& option) {
  std::string flag = std::string("--") + option.key;
  for (auto& c : flag)
    if (c == '_') c = '-';
  return flag;
}

namespace {

// Names a deploy option in errors the way a user may have written it.
std::string option_name(const std::string& key) {
  for (const auto& o : deploy_options())
    if (key == o.key) return "deploy." + key + " (" + deploy_flag_name(o) + ")";
  return "deploy." + key;
}

int64_t parse_int(const std::string& key, const std::string& text, int64_t min, int64_t max) {
  size_t used = 0;
  long long v = 0;
  try { v = std::stoll(text, &used); } catch (const std::exception&) { used = 0; }
  CADRE_CONFIG_CHECK(used == text.size() && !text.empty(), option_name(key), " expects an integer, got '", text, "'");
  CADRE_CONFIG_CHECK(v >= min && v <= max, option_name(key), " must be in [", min, ", ", max, "], got ", v);
  return v;
}

// Kubernetes resource quantities: 8, 500m, 32Gi, 1.5, 1e3.
void check_quantity(const std::string& key, const std::string& text) {
  static const std::regex quantity(R"(^([0-9]+(\.[0-9]*)?|\.[0-9]+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?[0-9]+)?$)");
  CADRE_CONFIG_CHECK(std::regex_match(text, quantity), option_name(key), ": '", text,
                     "' is not a Kubernetes quantity (such as 8, 500m, 32Gi)");
}

// Slurm's time formats: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS. Returns seconds.
int64_t parse_slurm_time(const std::string& text) {
  static const std::regex with_days(R"(^(\d+)-(\d+)(?::(\d+))?(?::(\d+))?$)");
  static const std::regex without_days(R"(^(\d+)(?::(\d+))?(?::(\d+))?$)");
  std::smatch m;
  auto num = [&](int i) { return m[i].matched ? std::stoll(m[i].str()) : 0LL; };
  if (std::regex_match(text, m, with_days)) return ((num(1) * 24 + num(2)) * 60 + num(3)) * 60 + num(4);
  if (std::regex_match(text, m, without_days)) {
    if (m[3].matched) return (num(1) * 60 + num(2)) * 60 + num(3);  // HH:MM:SS
    return num(1) * 60 + num(2);                                     // MM or MM:SS
  }
  throw ConfigError(str(option_name("time"), ": '", text,
                        "' is not a Slurm time limit (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS)"));
}

std::string random_hex(int digits) {
  std::random_device rd;
  std::uniform_int_distribution<int> d(0, 15);
  std::string out;
  for (int i = 0; i < digits; ++i) out += "0123456789abcdef"[d(rd)];
  return out;
}

std::string default_name(const Config& c) {
  std::string base = fs::path(c.run.dir).lexically_normal().filename().string();
  if (base.empty() || base == ".") base = fs::path(c.run.dir).lexically_normal().parent_path().filename().string();
  std::string name = "cadre-";
  for (char ch : base) name += std::isalnum(static_cast<unsigned char>(ch)) ? static_cast<char>(std::tolower(ch)) : '-';
  name = name.substr(0, 40);
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name;
}

// The config's paths must lie on the shared volume: every pod reads and writes them there.
void check_on_volume(const std::string& key, const std::string& path, const std::string& mount) {
  fs::path p = fs::path(path).is_absolute() ? fs::path(path) : fs::path(mount) / path;
  p = p.lexically_normal();
  auto rel = p.lexically_relative(fs::path(mount).lexically_normal());
  CADRE_CONFIG_CHECK(!rel.empty() && *rel.begin() != "..", key, " '", path, "' is not on the shared volume mounted at ",
                     mount, " (deploy.mount_path): pods would not share it; use a relative path or one under ", mount);
}

}  // namespace

std::pair<int64_t, int64_t> parse_node_range(const std::string& text, const std::string& what) {
  auto one = [&](const std::string& s, const char* part) {
    size_t used = 0;
    long long v = 0;
    try { v = std::stoll(s, &used); } catch (const std::exception&) { used = 0; }
    CADRE_CONFIG_CHECK(used == s.size() && !s.empty() && v >= 1, what, " ", part, " must be a positive integer, got '",
                       text, "'");
    return static_cast<int64_t>(v);
  };
  auto colon = text.find(':');
  if (colon == std::string::npos) {
    int64_t n = one(text, "(N or MIN:MAX)");
    return {n, n};
  }
  int64_t lo = one(text.substr(0, colon), "MIN"), hi = one(text.substr(colon + 1), "MAX");
  CADRE_CONFIG_CHECK(lo <= hi, what, " ", text, ": MIN (", lo, ") must not exceed MAX (", hi, ")");
  return {lo, hi};
}

std::vector<std::string> mesh_problems(const Config& c, int64_t min_nodes, int64_t max_nodes, int64_t nproc) {
  std::vector<std::string> problems;
  if (c.parallel.strategy != Strategy::HybridShard) return problems;  // the other strategies run on any world size
  for (int64_t n = min_nodes; n <= max_nodes; ++n) {
    int64_t world = n * nproc;
    int64_t group = c.parallel.shard_group_size == 0 ? nproc : c.parallel.shard_group_size;
    if (c.parallel.shard_group_size == 0 && n == 1)
      problems.push_back(str(n, " node: HYBRID_SHARD with parallel.shard_group_size 0 (one group per node) needs "
                                "at least 2 nodes"));
    else if (world % group != 0)
      problems.push_back(str(n, " node(s) x ", nproc, " = ", world, " ranks: parallel.shard_group_size ", group,
                             " does not divide it"));
  }
  return problems;
}

// NCCL's settings (NCCL_DEBUG, NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...) as set where deploy runs.
static std::vector<std::pair<std::string, std::string>> nccl_environment() {
  std::vector<std::pair<std::string, std::string>> out;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (entry.rfind("NCCL_", 0) == 0 && eq != std::string::npos) out.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
  }
  std::sort(out.begin(), out.end());
  return out;
}

DeploySpec deploy_spec_resolve(const Config& config, const std::map<std::string, std::string>& flag_values,
                               Target target) {
  // Config section first, flags over it; unknown keys in the section are typos.
  std::map<std::string, std::string> v;
  std::string known;
  for (const auto& o : deploy_options()) {
    v[o.key] = o.default_value;
    known += std::string(" ") + o.key;
  }
  for (const auto& [key, value] : config.deploy) {
    CADRE_CONFIG_CHECK(v.count(key), "unknown key 'deploy.", key, "'; keys in 'deploy' are:", known);
    v[key] = value;
  }
  for (const auto& [key, value] : flag_values) v.at(key) = value;

  DeploySpec s;
  s.config = config;
  bool k8s = target == Target::kubernetes;

  s.name = v["name"].empty() ? default_name(config) : v["name"];
  static const std::regex dns1035("^[a-z]([-a-z0-9]*[a-z0-9])?$");
  CADRE_CONFIG_CHECK(std::regex_match(s.name, dns1035) && s.name.size() <= 40, option_name("name"), ": '", s.name,
                     "' must be a DNS-1035 label of at most 40 characters (lower-case letters, digits and '-', "
                     "starting with a letter): Kubernetes objects and pods are named after it");
  std::tie(s.min_nodes, s.max_nodes) = parse_node_range(v["nodes"], option_name("nodes"));
  s.nproc_per_node = parse_int("nproc_per_node", v["nproc_per_node"], 1, 1024);
  s.max_restarts = parse_int("max_restarts", v["max_restarts"], 0, 1000);
  auto problems = mesh_problems(config, s.min_nodes, s.max_nodes, s.nproc_per_node);
  if (!problems.empty()) {
    std::string all;
    for (const auto& p : problems) all += "\n  " + p;
    throw ConfigError(str(option_name("nodes"), " ", v["nodes"], " with ", option_name("nproc_per_node"), " ",
                          s.nproc_per_node, ": the config's parallel layout (parallel.strategy ",
                          strategy_name(config.parallel.strategy), ") cannot run on", all));
  }
  // A CUDA job wants one GPU per local rank (each worker takes LOCAL_RANK's); set explicitly, the
  // count is taken as given.
  s.gpus = v["gpus"].empty() ? (config.train.device == "cuda" ? s.nproc_per_node : 0)
                             : parse_int("gpus", v["gpus"], 0, 64);
  s.nccl_env = nccl_environment();
  s.cpu = v["cpu"];
  s.memory = v["memory"];
  if (!s.cpu.empty()) check_quantity("cpu", s.cpu);
  if (!s.memory.empty()) check_quantity("memory", s.memory);

  if (k8s) {
    s.api = v["api"];
    CADRE_CONFIG_CHECK(s.api == "trainjob" || s.api == "pytorchjob", option_name("api"), ": unknown '", s.api,
                       "' (trainjob or pytorchjob)");
    s.image = v["image"];
    CADRE_CONFIG_CHECK(!s.image.empty(), option_name("image"),
                       " is required for Kubernetes: the container image the workers run (build it from Dockerfile)");
    CADRE_CONFIG_CHECK(s.image.find_first_of(" \t\n") == std::string::npos, option_name("image"), ": '", s.image,
                       "' contains whitespace");
    s.ns = v["namespace"];
    static const std::regex dns1123("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
    CADRE_CONFIG_CHECK(std::regex_match(s.ns, dns1123) && s.ns.size() <= 63, option_name("namespace"), ": '", s.ns,
                       "' is not a valid namespace name");
    s.efa = parse_int("efa", v["efa"], 0, 32);
    s.shm_size = v["shm_size"];
    check_quantity("shm_size", s.shm_size);
    s.write_claim = v["volume_claim"].empty();
    s.volume_claim = s.write_claim ? s.name + "-data" : v["volume_claim"];
    CADRE_CONFIG_CHECK(std::regex_match(s.volume_claim, dns1123), option_name("volume_claim"), ": '", s.volume_claim,
                       "' is not a valid claim name");
    s.volume_size = v["volume_size"];
    check_quantity("volume_size", s.volume_size);
    s.storage_class = v["storage_class"];
    s.mount_path = v["mount_path"];
    CADRE_CONFIG_CHECK(fs::path(s.mount_path).is_absolute() && s.mount_path != "/", option_name("mount_path"), ": '",
                       s.mount_path, "' must be an absolute directory other than /");
    if (!config.data.dir.empty()) check_on_volume("data.dir", config.data.dir, s.mount_path);
    check_on_volume("run.dir", config.run.dir, s.mount_path);
    if (!config.checkpoint.dir.empty()) check_on_volume("checkpoint.dir", config.checkpoint.dir, s.mount_path);
    s.metrics_port = parse_int("metrics_port", v["metrics_port"], 1, 65535);
    s.grace_period_s = parse_int("grace_period", v["grace_period"], 15, 86400);
    // The agent needs a few seconds after its workers stop to leave the rendezvous.
    s.stop_timeout_s = s.grace_period_s - 10;
    s.etcd_image = v["etcd_image"];
    CADRE_CONFIG_CHECK(!s.etcd_image.empty(), option_name("etcd_image"), " must not be empty");
    s.dcgm_exporter_image = v["dcgm_exporter_image"];
    CADRE_CONFIG_CHECK(!s.dcgm_exporter_image.empty() && s.dcgm_exporter_image.find_first_of(" \t\n") == std::string::npos,
                       option_name("dcgm_exporter_image"), ": '", s.dcgm_exporter_image,
                       "' must be an image name without whitespace");
    s.rdzv_id = v["rdzv_id"].empty() ? s.name + "-" + random_hex(8) : v["rdzv_id"];
    CADRE_CONFIG_CHECK(s.rdzv_id != "none", option_name("rdzv_id"),
                       ": 'none' is torchrun's shared default and makes jobs collide on etcd keys; leave it unset");
    static const std::regex id_chars("^[A-Za-z0-9][-A-Za-z0-9_.]*$");
    CADRE_CONFIG_CHECK(std::regex_match(s.rdzv_id, id_chars), option_name("rdzv_id"), ": '", s.rdzv_id,
                       "' may hold only letters, digits, '-', '_' and '.'");
  } else {
    // sbatch takes whole CPUs and memory in K/M/G/T.
    static const std::regex slurm_cpu("^[0-9]+$"), slurm_mem("^[0-9]+[KMGT]i?$");
    CADRE_CONFIG_CHECK(s.cpu.empty() || std::regex_match(s.cpu, slurm_cpu), option_name("cpu"), ": '", s.cpu,
                       "': Slurm takes a whole number of CPUs per task");
    CADRE_CONFIG_CHECK(s.memory.empty() || std::regex_match(s.memory, slurm_mem), option_name("memory"), ": '",
                       s.memory, "': Slurm takes a whole number with K, M, G or T (such as 32G or 32Gi)");
    s.partition = v["partition"];
    s.time = v["time"];
    if (!s.time.empty() && s.time != "UNLIMITED" && s.time != "INFINITE") s.time_limit_s = parse_slurm_time(s.time);
    s.signal_before_s = parse_int("signal_before", v["signal_before"], 1, 65535);
    CADRE_CONFIG_CHECK(s.time_limit_s == 0 || s.signal_before_s < s.time_limit_s, option_name("signal_before"), " (",
                       s.signal_before_s, " s) must be shorter than ", option_name("time"), " (", s.time, " = ",
                       s.time_limit_s, " s)");
    s.max_requeues = parse_int("max_requeues", v["max_requeues"], 0, 1000);
    // Slurm nodes may be shared by jobs: 0 (any free port) keeps two of them from colliding.
    s.metrics_port = parse_int("metrics_port", v["metrics_port"], 0, 65535);
    s.cadre = v["cadre"];
    if (s.cadre.empty()) {
      std::error_code ec;
      s.cadre = fs::read_symlink("/proc/self/exe", ec).string();
      CADRE_CHECK(!ec, "cannot read /proc/self/exe to find the cadre binary: ", ec.message(), "; pass --cadre PATH");
    }
    CADRE_CONFIG_CHECK(fs::path(s.cadre).is_absolute(), option_name("cadre"), ": '", s.cadre,
                       "' must be an absolute path (the nodes run it from any directory)");
    s.workdir = v["workdir"].empty() ? fs::current_path().string() : v["workdir"];
    CADRE_CONFIG_CHECK(fs::path(s.workdir).is_absolute(), option_name("workdir"), ": '", s.workdir,
                       "' must be an absolute path");
    // dcgm-exporter's default port: a GPU node running it leaves the agents' /metrics unreachable there.
    if (config.train.device == "cuda" && s.metrics_port == 9400)
      log::warn("deploy.metrics_port (--metrics-port) 9400 is dcgm-exporter's default port: on GPU nodes that run "
                "it the agents cannot bind it; leave the default 9464");
    for (const auto& key : {"image", "efa", "dcgm_exporter_image"})
      if (config.deploy.count(key)) log::warn(str("deploy.", key, " applies to Kubernetes only; ignored for Slurm"));
  }
  CADRE_CONFIG_CHECK(!config.data.dir.empty(), "data.dir is empty: the job's workers need the prepared data (",
                     k8s ? "on the shared volume" : "on a file system every node sees", ")");
  if (config.checkpoint.interval == 0)
    log::warn("checkpoint.interval is 0: a job restarted after a crash starts over (a signal still checkpoints); "
              "set it so retries resume");
  return s;
}

}  // namespace cadre::deploy
