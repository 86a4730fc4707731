// The communicators a sharding strategy needs over the data-parallel ranks, created once per
// job: the ranks a unit is sharded over and the replicas its gradients are averaged across
// (HYBRID_SHARD: a shard group per node, a replica group per local rank). One-rank groups are
// left out.
#pragma once

#include <memory>

#include "comm/comm.h"
#include "shard/fully_shard.h"

namespace cadre {

struct ParallelGroups {
  std::unique_ptr<comm::Communicator> world;  // the env overload only; null on one rank
  std::unique_ptr<comm::Communicator> shard_owned, replica_owned;
  ShardGroups groups;  // what FullyShardOptions takes
};

// Collective over the ranks of `data_parallel` (null: one data-parallel rank). On a 2-D mesh
// that is the mesh's dp dimension (shard/device_mesh.h). `shard_group_size` applies to
// HYBRID_SHARD only and counts data-parallel ranks.
ParallelGroups make_parallel_groups(comm::Communicator* data_parallel, Strategy strategy, int64_t shard_group_size);

// Collective over the job, every rank data parallel (a 1-D mesh).
ParallelGroups make_parallel_groups(const comm::JobEnv& env, Strategy strategy, int64_t shard_group_size,
                                    const comm::CommOptions& options);

}  // namespace cadre
