// Straggler detection over per-rank step times (see straggler_tracker.h).
#include "obs/straggler_tracker.h"

#include <algorithm>
#include <cstdio>

#include "core/error.h"

namespace cadre::obs {
namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

std::string StragglerChange::describe() const {
  char ratio_text[32];
  std::snprintf(ratio_text, sizeof ratio_text, "%.2f", ratio);
  if (straggling)
    return str("straggler: rank ", rank, " is ", ratio_text, "x slower than the other ranks' median (busy time, median of the "
               "last steps, at step ", step, "); ", cause);
  return str("straggler: rank ", rank, " is back near the other ranks' median (", ratio_text, "x at step ", step, ")");
}

std::vector<StragglerChange> StragglerTracker::update(int64_t step, const std::vector<RankTimes>& times) {
  std::vector<StragglerChange> changes;
  const size_t n = times.size();
  if (ranks_.size() != n) ranks_.assign(n, State{});
  if (n < 2) return changes;
  std::vector<double> busy, compute, data;
  for (const auto& t : times) {
    busy.push_back(t.busy_s());
    compute.push_back(t.compute_s);
    data.push_back(t.data_wait_s);
  }
  // Each rank against the median of the *other* ranks: with two ranks that is the other one
  // (against the median of all, a rank twice as slow as its only peer would be 1.33x).
  auto others = [&](const std::vector<double>& v, size_t r) {
    std::vector<double> rest;
    for (size_t i = 0; i < v.size(); ++i)
      if (i != r) rest.push_back(v[i]);
    return median(rest);
  };
  const size_t window = size_t(std::max<int64_t>(1, options_.steps));
  auto push = [window](std::vector<double>& v, double x) {
    v.push_back(x);
    if (v.size() > window) v.erase(v.begin());
  };
  for (size_t r = 0; r < n; ++r) {
    State& s = ranks_[r];
    const double med_busy = others(busy, r), med_compute = others(compute, r), med_data = others(data, r);
    const bool noise = busy[r] - med_busy <= options_.min_excess_s;
    push(s.ratios, med_busy > 0 && !noise ? busy[r] / med_busy : std::min(1.0, med_busy > 0 ? busy[r] / med_busy : 1.0));
    push(s.compute_excess, compute[r] - med_compute);
    push(s.data_excess, data[r] - med_data);
    if (s.ratios.size() < window) continue;
    s.ratio = median(s.ratios);
    // Which part of its excess over the others' median is larger: computing, or waiting for batches.
    const std::string cause =
        median(s.compute_excess) >= median(s.data_excess) ? "compute-bound" : "waiting for data";
    if (!s.straggling && s.ratio > options_.factor) {
      s.straggling = true;
      s.cause = cause;
      changes.push_back({step, int(r), true, s.ratio, cause});
    } else if (s.straggling && s.ratio <= 1 + (options_.factor - 1) / 2) {  // hysteresis: no flapping
      s.straggling = false;
      changes.push_back({step, int(r), false, s.ratio, s.cause});
      s.cause.clear();
    } else if (s.straggling) {
      s.cause = cause;
    }
  }
  return changes;
}

bool StragglerTracker::straggling(int rank) const {
  return rank >= 0 && size_t(rank) < ranks_.size() && ranks_[rank].straggling;
}
double StragglerTracker::ratio(int rank) const {
  return rank >= 0 && size_t(rank) < ranks_.size() ? ranks_[rank].ratio : 1;
}
const std::string& StragglerTracker::cause(int rank) const {
  static const std::string none;
  return rank >= 0 && size_t(rank) < ranks_.size() ? ranks_[rank].cause : none;
}

}  // namespace cadre::obs
