// The communicators a sharding strategy needs, created once per job: the ranks a unit is
// sharded over and the replicas its gradients are averaged across (HYBRID_SHARD: a shard
// group per node, a replica group per local rank). One-rank groups are left out.
#pragma once

#include <memory>

#include "comm/comm.h"
#include "shard/fully_shard.h"

namespace cadre {

struct ParallelGroups {
  std::unique_ptr<comm::Communicator> world;  // null on one rank
  std::unique_ptr<comm::Communicator> shard_owned, replica_owned;
  ShardGroups groups;  // what FullyShardOptions takes
};

// Collective over the job. `shard_group_size` applies to HYBRID_SHARD only.
ParallelGroups make_parallel_groups(const comm::JobEnv& env, Strategy strategy, int64_t shard_group_size,
                                    const comm::CommOptions& options);

}  // namespace cadre
