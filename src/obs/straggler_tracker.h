// Straggler attribution: from every rank's compute and wait times per step (gathered on the
// loss all-reduce the trainer already does), name a rank that stays slower than the median
// rank by a factor for several steps in a row, and say whether it is compute-bound or waiting
// for data. In synchronous training every rank's step takes as long as the slowest one's, so
// the comparison is on busy time (compute + data wait): the fast ranks spend the difference
// waiting in collectives for the slow one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre::obs {

struct RankTimes {
  double compute_s = 0, comm_wait_s = 0, data_wait_s = 0;
  double busy_s() const { return compute_s + data_wait_s; }
};

struct StragglerOptions {
  double factor = 1.5;   // busy time above factor x the other ranks' median counts as slow
  // Over the last `steps` steps, the median of a rank's ratio to the other ranks' median decides: above
  // the factor makes it a straggler; below half-way between 1 and the factor ends it. A median, not "every step", so that one
  // noisy step (a page fault, a neighbour's burst) neither hides nor makes a straggler.
  int64_t steps = 5;
  double min_excess_s = 0.002;  // ignore differences below this (timer noise on tiny steps)
};

// A rank that became, or stopped being, a straggler at `step`; `ratio` is the windowed median.
struct StragglerChange {
  int64_t step = 0;
  int rank = 0;
  bool straggling = false;   // true: became one; false: recovered
  double ratio = 0;          // its busy time / the median's, this step
  std::string cause;         // "compute-bound" | "waiting for data"
  std::string describe() const;
};

class StragglerTracker {
 public:
  explicit StragglerTracker(StragglerOptions options = {}) : options_(options) {}
  // Takes one step's times of every rank (index = rank); returns the changes it caused.
  std::vector<StragglerChange> update(int64_t step, const std::vector<RankTimes>& times);

  bool straggling(int rank) const;
  double ratio(int rank) const;        // last step's busy / median busy (1 with no data)
  const std::string& cause(int rank) const;
  const StragglerOptions& options() const { return options_; }

 private:
  struct State {
    std::vector<double> ratios;         // the last `steps` busy ratios (0 when within min_excess_s)
    std::vector<double> compute_excess, data_excess;
    bool straggling = false;
    double ratio = 1;
    std::string cause;
  };
  StragglerOptions options_;
  std::vector<State> ranks_;
};

}  // namespace cadre::obs
