// Balanced and listed splits of a trunk's blocks into pipeline stages (stage_split.h).
#include "pipeline/stage_split.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "core/error.h"

namespace cadre::pipeline {

std::vector<int64_t> stage_weights(const std::vector<int64_t>& w, const StageBounds& bounds, int64_t before,
                                   int64_t after) {
  std::vector<int64_t> out;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) {
    int64_t sum = 0;
    for (int64_t b = bounds[k]; b < bounds[k + 1]; ++b) sum += w[size_t(b)];
    out.push_back(sum);
  }
  if (!out.empty()) {
    out.front() += before;
    out.back() += after;
  }
  return out;
}

StageBounds balanced_split(const std::vector<int64_t>& w, int64_t stages, int64_t before, int64_t after) {
  const int64_t n = static_cast<int64_t>(w.size());
  CADRE_CONFIG_CHECK(stages >= 1 && n >= stages, "parallel.pp_size ", stages, " needs at least as many blocks; the model has ",
                     n);
  std::vector<int64_t> prefix(size_t(n + 1), 0);
  for (int64_t i = 0; i < n; ++i) prefix[size_t(i + 1)] = prefix[size_t(i)] + w[size_t(i)];
  auto load = [&](int64_t k, int64_t from, int64_t to) {  // stage k holding blocks [from, to)
    return prefix[size_t(to)] - prefix[size_t(from)] + (k == 0 ? before : 0) + (k == stages - 1 ? after : 0);
  };
  // heaviest[k][i]: the lightest heaviest stage over splits of blocks [0, i) into stages 0..k;
  // cut[k][i] the first block of stage k there (the smallest, for the earliest boundaries).
  constexpr int64_t kNone = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> heaviest(size_t(stages), std::vector<int64_t>(size_t(n + 1), kNone));
  std::vector<std::vector<int64_t>> cut(size_t(stages), std::vector<int64_t>(size_t(n + 1), 0));
  for (int64_t i = 1; i <= n; ++i) heaviest[0][size_t(i)] = load(0, 0, i);
  for (int64_t k = 1; k < stages; ++k)
    for (int64_t i = k + 1; i <= n; ++i)
      for (int64_t j = k; j < i; ++j) {
        if (heaviest[size_t(k - 1)][size_t(j)] == kNone) continue;
        const int64_t worst = std::max(heaviest[size_t(k - 1)][size_t(j)], load(k, j, i));
        if (worst < heaviest[size_t(k)][size_t(i)]) {
          heaviest[size_t(k)][size_t(i)] = worst;
          cut[size_t(k)][size_t(i)] = j;
        }
      }
  StageBounds bounds(size_t(stages + 1), 0);
  bounds[size_t(stages)] = n;
  for (int64_t k = stages - 1, i = n; k > 0; --k) i = bounds[size_t(k)] = cut[size_t(k)][size_t(i)];
  return bounds;
}

StageBounds split_from_list(const std::string& list, int64_t blocks, int64_t stages, const std::string& key) {
  StageBounds bounds = {0};
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    size_t used = 0;
    int64_t count = 0;
    try {
      count = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    CADRE_CONFIG_CHECK(used == item.size() && used > 0 && count > 0, key, ": '", item,
                       "' is not a positive number of blocks (\"", list, "\")");
    bounds.push_back(bounds.back() + count);
  }
  CADRE_CONFIG_CHECK(int64_t(bounds.size()) - 1 == stages, key, " lists ", bounds.size() - 1,
                     " stages; parallel.pp_size is ", stages);
  CADRE_CONFIG_CHECK(bounds.back() == blocks, key, " holds ", bounds.back(), " blocks; the model has ", blocks);
  return bounds;
}

}  // namespace cadre::pipeline
