// Shard permutation + windowed shuffle.
#include "data/shard_window_order.h"

#include <algorithm>

#include "core/error.h"
#include "data/permutation.h"

namespace cadre {

ShardWindowOrder::ShardWindowOrder(std::vector<uint64_t> shard_sizes, uint64_t seed, Split split, uint64_t window)
    : sizes_(std::move(shard_sizes)), seed_(seed), window_(std::max<uint64_t>(1, window)), split_(split) {
  for (uint64_t s : sizes_) {
    starts_.push_back(total_);
    total_ += s;
  }
  CADRE_CHECK(total_ > 0, "no samples to order");
}

ShardRecord ShardWindowOrder::in_file_order(uint64_t index) const {
  CADRE_CHECK(index < total_, "sample ", index, " out of range (", total_, " samples)");
  const size_t s = std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1;
  return {static_cast<uint32_t>(s), index - starts_[s]};
}

void ShardWindowOrder::build_epoch(uint64_t epoch) {
  // Streams 2e+1 and 2e+2: the shard permutation and the window shuffles of epoch e.
  const std::vector<uint64_t> shards = permutation(sizes_.size(), seed_, 2 * epoch + 1);
  order_.clear();
  order_.reserve(total_);
  for (uint64_t s : shards)
    for (uint64_t r = 0; r < sizes_[s]; ++r) order_.push_back(starts_[s] + r);
  uint64_t window_index = 0;
  for (uint64_t begin = 0; begin < total_; begin += window_, ++window_index) {
    const uint64_t n = std::min(window_, total_ - begin);
    const std::vector<uint64_t> p = permutation(n, seed_ ^ (window_index * 0xD1B54A32D192ED03ULL), 2 * epoch + 2);
    std::vector<uint64_t> slice(order_.begin() + static_cast<std::ptrdiff_t>(begin),
                                order_.begin() + static_cast<std::ptrdiff_t>(begin + n));
    for (uint64_t i = 0; i < n; ++i) order_[begin + i] = slice[p[i]];
  }
  epoch_ = epoch;
}

ShardRecord ShardWindowOrder::at(uint64_t global_index) {
  const uint64_t epoch = global_index / total_, offset = global_index % total_;
  if (split_ == Split::Val) return in_file_order(offset);
  if (epoch != epoch_) build_epoch(epoch);
  return in_file_order(order_[offset]);
}

}  // namespace cadre
