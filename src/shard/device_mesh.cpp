// The dp x tp mesh's communicators: the world, then this rank's tp group, then its dp group.
#include "shard/device_mesh.h"

#include <cstdlib>
#include <vector>

#include "core/error.h"
#include "core/log.h"

namespace cadre {

DeviceMesh::DeviceMesh(const comm::JobEnv& env, int64_t tp_size, const comm::CommOptions& options) : rank_(env.rank) {
  CADRE_CONFIG_CHECK(tp_size >= 1 && env.world_size % tp_size == 0, "parallel.tp_size ", tp_size,
                     " does not divide WORLD_SIZE=", env.world_size, " (data parallelism runs over WORLD_SIZE / tp_size)");
  tp_size_ = static_cast<int>(tp_size);
  dp_size_ = env.world_size / tp_size_;
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int per_node = local && *local ? std::atoi(local) : env.world_size;
  if (rank_ == 0 && tp_size_ > 1 && per_node > 0 && per_node % tp_size_ != 0)
    log::warn(str("parallel.tp_size ", tp_size_, " does not divide the ", per_node,
                  " ranks per node: tensor-parallel groups span nodes, and their per-layer collectives cross the network"));
  if (env.world_size == 1) return;
  world_ = std::make_unique<comm::Communicator>(env, options);
  if (tp_size_ == 1 || dp_size_ == 1) return;  // the one non-trivial dimension is the world
  // Every rank connects its tp group first, then its dp group: groups of one dimension are
  // disjoint, so no rank waits for a group whose members are still busy with another.
  std::vector<int> tp_ranks, dp_ranks;
  for (int t = 0; t < tp_size_; ++t) tp_ranks.push_back(dp_rank() * tp_size_ + t);
  for (int d = 0; d < dp_size_; ++d) dp_ranks.push_back(d * tp_size_ + tp_rank());
  tp_ = world_->subgroup(tp_ranks, str("tp", dp_rank()));
  dp_ = world_->subgroup(dp_ranks, str("dp", tp_rank()));
}

comm::Communicator* DeviceMesh::get(const std::string& dim) const {
  if (dim == "tp") return tp();
  if (dim == "dp") return dp();
  if (dim == "world") return world();
  throw Error(str("device mesh: no dimension '", dim, "' (dp, tp, world)"));
}

std::string DeviceMesh::describe() const { return str("dp ", dp_size_, " x tp ", tp_size_); }

}  // namespace cadre
