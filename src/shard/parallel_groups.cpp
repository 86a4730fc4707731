// Communicators per strategy.
#include "shard/parallel_groups.h"

namespace cadre {

ParallelGroups make_parallel_groups(comm::Communicator* dp, Strategy strategy, int64_t shard_group_size) {
  ParallelGroups g;
  if (!dp) return g;
  switch (strategy) {
    case Strategy::NoShard: g.groups.replica = dp; break;
    case Strategy::FullShard:
    case Strategy::ShardGradOp:
    case Strategy::Zero1: g.groups.shard = dp; break;
    case Strategy::HybridShard: {
      auto hybrid = comm::make_hybrid_groups(*dp, static_cast<int>(shard_group_size));
      g.shard_owned = std::move(hybrid.shard);
      g.replica_owned = std::move(hybrid.replica);
      if (g.shard_owned->size() > 1) g.groups.shard = g.shard_owned.get();
      if (g.replica_owned->size() > 1) g.groups.replica = g.replica_owned.get();
      break;
    }
  }
  return g;
}

ParallelGroups make_parallel_groups(const comm::JobEnv& env, Strategy strategy, int64_t shard_group_size,
                                    const comm::CommOptions& options) {
  std::unique_ptr<comm::Communicator> world;
  if (env.world_size > 1) world = std::make_unique<comm::Communicator>(env, options);
  ParallelGroups g = make_parallel_groups(world.get(), strategy, shard_group_size);
  g.world = std::move(world);
  return g;
}

}  // namespace cadre
