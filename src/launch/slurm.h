// Slurm integration: under `srun`, the node count, node rank and rendezvous host come from the
// SLURM_* environment. Includes the parsers for compressed host lists and task counts.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace cadre::launch {

// "n[1-3,7],gpu[01-02]-ib" -> n1 n2 n3 n7 gpu01-ib gpu02-ib (zero padding kept).
// Throws ConfigError naming the list when it is malformed.
std::vector<std::string> slurm_hostlist_expand(const std::string& hostlist);

// "2(x3),1" -> 2 2 2 1 (SLURM_TASKS_PER_NODE and friends).
std::vector<int64_t> slurm_counts_expand(const std::string& counts);

struct SlurmLaunch {
  std::string job_id;
  int64_t nnodes = 0;
  int64_t node_rank = 0;
  std::string first_host;      // hosts the rendezvous store
  int64_t tasks_on_this_node = 1;
  uint16_t port = 29500;       // 29500 + job id % 1000: jobs sharing a machine do not collide
};

// The launch described by the environment when running inside an srun step, else nullopt.
using GetEnv = std::function<const char*(const char*)>;
std::optional<SlurmLaunch> slurm_launch_from_env(const GetEnv& getenv);

// An address for a Slurm node name: the name itself when DNS resolves it, else the NodeAddr that
// `scontrol show node` reports (fake or unlisted nodes), else the name unchanged.
std::string slurm_node_address(const std::string& node);

}  // namespace cadre::launch
