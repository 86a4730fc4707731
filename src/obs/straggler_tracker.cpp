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
    return str("straggler: rank ", rank, " is ", ratio_text, "x slower than the median rank (busy time, step ", step,
               "); ", cause);
  return str("straggler: rank ", rank, " is back within the factor of the median (", ratio_text, "x at step ", step,
             ")");
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
  const double med_busy = median(busy), med_compute = median(compute), med_data = median(data);
  for (size_t r = 0; r < n; ++r) {
    State& s = ranks_[r];
    s.ratio = med_busy > 0 ? busy[r] / med_busy : 1;
    const bool slow = busy[r] > options_.factor * med_busy && busy[r] - med_busy > options_.min_excess_s;
    s.slow_run = slow ? s.slow_run + 1 : 0;
    s.fast_run = slow ? 0 : s.fast_run + 1;
    // Which part of the excess is larger: its own computation, or waiting for its batches.
    const std::string cause = compute[r] - med_compute >= data[r] - med_data ? "compute-bound" : "waiting for data";
    if (!s.straggling && s.slow_run >= options_.steps) {
      s.straggling = true;
      s.cause = cause;
      changes.push_back({step, int(r), true, s.ratio, cause});
    } else if (s.straggling && s.fast_run >= options_.steps) {
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
