// Grouping of blocks into FSDP units.
#include "shard/wrap_policy.h"

namespace cadre {

std::vector<std::vector<int64_t>> wrap_blocks(const std::vector<int64_t>& block_params, int64_t min_params) {
  std::vector<std::vector<int64_t>> units;
  std::vector<int64_t> current;
  int64_t count = 0;
  for (size_t i = 0; i < block_params.size(); ++i) {
    current.push_back(static_cast<int64_t>(i));
    count += block_params[i];
    if (count >= min_params) {
      units.push_back(current);
      current.clear();
      count = 0;
    }
  }
  // Blocks left over are smaller than a unit: they join the last one rather than form a runt.
  if (!current.empty()) {
    if (units.empty()) units.push_back({});
    units.back().insert(units.back().end(), current.begin(), current.end());
  }
  return units;
}

}  // namespace cadre
