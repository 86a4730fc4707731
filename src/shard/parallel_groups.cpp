// Communicators per strategy.
#include "shard/parallel_groups.h"

namespace cadre {

ParallelGroups make_parallel_groups(const comm::JobEnv& env, Strategy strategy, int64_t shard_group_size,
                                    const comm::CommOptions& options) {
  ParallelGroups g;
  if (env.world_size == 1) return g;
  g.world = std::make_unique<comm::Communicator>(env, options);
  switch (strategy) {
    case Strategy::NoShard: g.groups.replica = g.world.get(); break;
    case Strategy::FullShard:
    case Strategy::ShardGradOp: g.groups.shard = g.world.get(); break;
    case Strategy::HybridShard: {
      auto hybrid = comm::make_hybrid_groups(*g.world, static_cast<int>(shard_group_size));
      g.shard_owned = std::move(hybrid.shard);
      g.replica_owned = std::move(hybrid.replica);
      if (g.shard_owned->size() > 1) g.groups.shard = g.shard_owned.get();
      if (g.replica_owned->size() > 1) g.groups.replica = g.replica_owned.get();
      break;
    }
  }
  return g;
}

}  // namespace cadre
