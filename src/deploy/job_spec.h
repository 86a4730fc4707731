// The job spec `cadre deploy` works from: the training config (the file `cadre train` reads,
// `--set` overrides applied) plus deploy options, taken from the config's `deploy:` section and
// overridden by flags of the same names. Resolving it checks everything a cluster would only
// find out later (exit code 2 naming the key or flag).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/config.h"

namespace cadre::deploy {

enum class Target { kubernetes, slurm };

// One deploy option: `deploy.<key>` in the config, `--<key with - for _>` on the command line.
struct DeployOption {
  const char* key;
  const char* default_value;  // "" means unset (or derived, as the help says)
  const char* help;
  bool kubernetes, slurm;     // which targets use it (flags are offered only there)
};
const std::vector<DeployOption>& deploy_options();
std::string deploy_flag_name(const DeployOption& option);  // "--nproc-per-node"

struct DeploySpec {
  Config config;          // what the workers read (its `deploy:` section included)
  std::string name;       // DNS-1035 label: every Kubernetes object and the Slurm job are named from it
  std::string ns;         // Kubernetes namespace
  std::string api;        // trainjob | pytorchjob
  int64_t min_nodes = 1, max_nodes = 1;
  int64_t nproc_per_node = 1;
  int64_t max_restarts = 3;   // cadre run --max-restarts (and the cluster's own retry budget)
  std::string image;
  std::string cpu, memory;    // per node, Kubernetes quantities; empty: not set
  // NCCL_* variables of the environment `cadre deploy` runs in (sorted by name), given to the
  // Kubernetes workers as written; an sbatch job inherits its submitter's environment anyway.
  std::vector<std::pair<std::string, std::string>> nccl_env;
  int64_t gpus = 0, efa = 0;  // per node: nvidia.com/gpu, vpc.amazonaws.com/efa
  std::string shm_size;
  std::string volume_claim;   // the PersistentVolumeClaim holding data, runs and checkpoints
  bool write_claim = true;    // false: volume_claim names an existing claim
  std::string volume_size, storage_class, mount_path;
  int64_t metrics_port = 0;
  int64_t grace_period_s = 0;  // pod terminationGracePeriodSeconds
  int64_t stop_timeout_s = 0;  // cadre run --stop-timeout: workers' time to checkpoint on SIGTERM
  std::string etcd_image;
  std::string dcgm_exporter_image;  // written only for train.device cuda
  std::string rdzv_id;         // shared by the job's nodes, unique per deployed job
  std::string partition, time;
  int64_t time_limit_s = 0;    // parsed `time`, 0 when unset
  int64_t signal_before_s = 0, max_requeues = 0;
  std::string cadre;           // Slurm: absolute path of the cadre binary on the nodes
  std::string workdir;         // Slurm: absolute directory relative config paths start from
};

// Resolves and checks the spec. `flag_values` holds the deploy flags given on the command line,
// keyed like the config (`nproc_per_node`). Throws ConfigError naming the key and flag.
DeploySpec deploy_spec_resolve(const Config& config, const std::map<std::string, std::string>& flag_values,
                               Target target);

// "N" or "MIN:MAX" as (min, max); `what` names the key in errors.
std::pair<int64_t, int64_t> parse_node_range(const std::string& text, const std::string& what);

// The node counts in [min, max] the config's parallel layout cannot run on, with why; empty if all fit.
std::vector<std::string> mesh_problems(const Config& config, int64_t min_nodes, int64_t max_nodes,
                                       int64_t nproc_per_node);

}  // namespace cadre::deploy
