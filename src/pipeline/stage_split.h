// Which blocks each pipeline stage holds: contiguous runs of a model's blocks (its sequential
// trunk), the first stage also holding what comes before the blocks (an embedding) and the last
// what comes after (norm, head, loss). Balanced by parameter count, or as a given list.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre::pipeline {

// Stage k holds blocks [bounds[k], bounds[k + 1]); bounds.front() 0, bounds.back() the blocks.
using StageBounds = std::vector<int64_t>;

// The split of `block_weights` (a block's parameters each) into `stages` non-empty contiguous
// runs whose heaviest stage (the first counting `before`, the last `after`) is lightest; of
// equally heavy splits the one with the earliest boundaries. ConfigError naming
// parallel.pp_size when there are fewer blocks than stages.
StageBounds balanced_split(const std::vector<int64_t>& block_weights, int64_t stages, int64_t before = 0,
                           int64_t after = 0);

// "4,4,3,3": blocks per stage, in order (parallel.pp_split). ConfigError naming `key` unless
// it lists `stages` positive counts that add up to `blocks`.
StageBounds split_from_list(const std::string& list, int64_t blocks, int64_t stages,
                            const std::string& key = "parallel.pp_split");

// Each stage's weight under `bounds` (with `before` and `after` on the first and last).
std::vector<int64_t> stage_weights(const std::vector<int64_t>& block_weights, const StageBounds& bounds,
                                   int64_t before = 0, int64_t after = 0);

}  // namespace cadre::pipeline
