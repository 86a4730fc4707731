// The training order of shard-stored samples for remote storage: each epoch a seeded
// permutation of the shards, their samples concatenated, then shuffled inside windows of
// `window` consecutive samples. A reader moves through a few shards at a time (large
// sequential reads) instead of one small random read per sample, and the order is still a
// function of (seed, epoch) alone, so resume and resharding stay exact. Validation: file order.
#pragma once

#include <cstdint>
#include <vector>

#include "data/sample_order.h"

namespace cadre {

// A sample's place: shard, and record inside it.
struct ShardRecord {
  uint32_t shard = 0;
  uint64_t record = 0;
};

class ShardWindowOrder {
 public:
  ShardWindowOrder(std::vector<uint64_t> shard_sizes, uint64_t seed, Split split, uint64_t window);
  uint64_t total() const { return total_; }
  // The sample at position `global_index` of the stream (epoch = global_index / total()).
  ShardRecord at(uint64_t global_index);
  // The sample with split index `index` (shards in file order), for validation.
  ShardRecord in_file_order(uint64_t index) const;

 private:
  void build_epoch(uint64_t epoch);

  std::vector<uint64_t> sizes_, starts_;
  uint64_t total_ = 0, seed_, window_;
  Split split_;
  uint64_t epoch_ = UINT64_MAX;
  std::vector<uint64_t> order_;  // split indices of this epoch
};

}  // namespace cadre
