// ShardPlan's sums and regrouping (shard_plan.h).
#include "shard/shard_plan.h"

#include <algorithm>

namespace cadre {

namespace {

int64_t sum_of(const std::vector<FlatPlan>& flats, int64_t FlatPlan::*field) {
  int64_t n = 0;
  for (const auto& f : flats) n += f.*field;
  return n;
}

int64_t largest_of(const std::vector<FlatPlan>& flats) {
  int64_t most = 0;
  for (const auto& f : flats) most = std::max(most, f.padded);
  return most;
}

void regroup(std::vector<FlatPlan>& flats, int group) {
  for (auto& f : flats) {
    f.padded = (f.numel + group - 1) / group * group;
    f.shard_numel = f.padded / group;
  }
}

}  // namespace

int64_t ShardPlan::numel() const { return sum_of(flats, &FlatPlan::numel); }
int64_t ShardPlan::padded_numel() const { return sum_of(flats, &FlatPlan::padded); }
int64_t ShardPlan::shard_numel() const { return sum_of(flats, &FlatPlan::shard_numel); }
int64_t ShardPlan::largest_padded() const { return largest_of(flats); }
int64_t ShardPlan::frozen_numel() const { return sum_of(frozen, &FlatPlan::numel); }
int64_t ShardPlan::frozen_shard_numel() const { return sum_of(frozen, &FlatPlan::shard_numel); }

ShardPlan ShardPlan::regrouped(int group) const {
  ShardPlan out = *this;
  out.shard_group = strategy_shards_parameters(strategy) || strategy == Strategy::Zero1 ? group : 1;
  regroup(out.flats, out.shard_group);
  regroup(out.frozen, out.shard_group);
  return out;
}

}  // namespace cadre
