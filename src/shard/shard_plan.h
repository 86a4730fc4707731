// What an FSDP tree will hold per rank, known before it allocates anything: each flat
// parameter's size and shard, and the tensors that stay whole. The memory estimate
// (train/memory_estimate.h) is computed from it, and `cadre train --dry-run` plans a world
// size it does not have by regrouping a one-rank plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/strategy.h"

namespace cadre {

// The outermost unit's name: it holds the parameters no inner unit takes.
inline constexpr char kRootUnit[] = "root";

struct FlatPlan {
  std::string unit;         // the unit's name ("layers.3", "root"), or "buckets" for NO_SHARD
  int64_t numel = 0;        // its parameters' elements (this rank's tensor-parallel parts)
  int64_t padded = 0;       // rounded up to a multiple of the shard group
  int64_t shard_numel = 0;  // padded / the shard group: what this rank keeps when sharded
};

struct ShardPlan {
  Strategy strategy = Strategy::NoShard;
  int shard_group = 1;                 // ranks a flat parameter is sharded over (1 for NO_SHARD)
  std::vector<FlatPlan> flats;         // trainable parameters: inner units first, the root last
  std::vector<FlatPlan> frozen;        // frozen parameters, the same way (NO_SHARD: one "frozen")
  int64_t buffer_bytes = 0;            // buffers, whole on every rank

  int64_t numel() const;               // trainable elements, unpadded
  int64_t padded_numel() const;
  int64_t shard_numel() const;         // what this rank keeps of them (all of them when whole)
  int64_t largest_padded() const;      // the largest unit, padded: what one gather makes whole
  int64_t frozen_numel() const;        // the same for the frozen parameters
  int64_t frozen_shard_numel() const;
  // The same units sharded over `group` ranks (a world the planning process does not have).
  ShardPlan regrouped(int group) const;
};

}  // namespace cadre
