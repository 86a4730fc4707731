// The pp x dp x tp mesh's communicators: the world, then this rank's tp group, its dp group and
// its pp group.
#include "shard/device_mesh.h"

#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace cadre {

DeviceMesh::DeviceMesh(const comm::JobEnv& env, int64_t tp_size, const comm::CommOptions& options, int64_t pp_size)
    : rank_(env.rank) {
  CADRE_CONFIG_CHECK(tp_size >= 1 && env.world_size % tp_size == 0, "parallel.tp_size ", tp_size,
                     " does not divide WORLD_SIZE=", env.world_size, " (data parallelism runs over WORLD_SIZE / tp_size)");
  CADRE_CONFIG_CHECK(pp_size >= 1 && env.world_size % (tp_size * pp_size) == 0, "parallel.pp_size ", pp_size,
                     " x parallel.tp_size ", tp_size, " does not divide WORLD_SIZE=", env.world_size,
                     " (data parallelism runs over WORLD_SIZE / (pp_size x tp_size))");
  tp_size_ = static_cast<int>(tp_size);
  pp_size_ = static_cast<int>(pp_size);
  dp_size_ = env.world_size / (tp_size_ * pp_size_);
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int per_node = local && *local ? std::atoi(local) : env.world_size;
  if (rank_ == 0 && tp_size_ > 1 && per_node > 0 && per_node % tp_size_ != 0)
    log::warn(str("parallel.tp_size ", tp_size_, " does not divide the ", per_node,
                  " ranks per node: tensor-parallel groups span nodes, and their per-layer collectives cross the network"));
  if (env.world_size == 1) return;
  world_ = std::make_unique<comm::Communicator>(env, options);
  // Every rank connects its tp group first, then its dp group, then its pp group: groups of one
  // dimension are disjoint, so no rank waits for a group whose members are still busy with
  // another. A dimension that is the whole world uses the world's communicator.
  const int d = dp_rank(), t = tp_rank(), s = pp_rank();
  auto rank_of = [&](int pp, int dp, int tp) { return (pp * dp_size_ + dp) * tp_size_ + tp; };
  std::vector<int> tp_ranks, dp_ranks, pp_ranks;
  for (int i = 0; i < tp_size_; ++i) tp_ranks.push_back(rank_of(s, d, i));
  for (int i = 0; i < dp_size_; ++i) dp_ranks.push_back(rank_of(s, i, t));
  for (int i = 0; i < pp_size_; ++i) pp_ranks.push_back(rank_of(i, d, t));
  // Tags name the group by its fixed coordinates (unique per dimension).
  if (tp_size_ > 1 && tp_size_ < env.world_size) tp_ = world_->subgroup(tp_ranks, str("tp", s * dp_size_ + d));
  if (dp_size_ > 1 && dp_size_ < env.world_size) dp_ = world_->subgroup(dp_ranks, str("dp", s * tp_size_ + t));
  if (pp_size_ > 1 && pp_size_ < env.world_size) pp_ = world_->subgroup(pp_ranks, str("pp", d * tp_size_ + t));
}

comm::Communicator* DeviceMesh::get(const std::string& dim) const {
  if (dim == "tp") return tp();
  if (dim == "dp") return dp();
  if (dim == "pp") return pp();
  if (dim == "world") return world();
  throw Error(str("device mesh: no dimension '", dim, "' (pp, dp, tp, world)"));
}

std::string DeviceMesh::describe() const {
  if (pp_size_ == 1) return str("dp ", dp_size_, " x tp ", tp_size_);
  return str("pp ", pp_size_, " x dp ", dp_size_, " x tp ", tp_size_);
}

}  // namespace cadre
