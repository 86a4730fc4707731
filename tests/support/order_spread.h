// The bound for "N ranks follow one rank" over many training steps, derived from the run itself
// instead of a fixed relative tolerance.
//
// Two runs that compute the same function and differ only in the order of their float32 sums
// (a ring reduce-scatter starts each block's sum at another rank; one rank adds micro-batches
// in turn) start apart by rounding, a few ulps. Training then amplifies that difference by a
// factor set by the trajectory and the optimizer (a small ResNet's runs branch where a ReLU input
// sits within an ulp of zero; AdamW divides by sqrt(v) + eps), and the kernels the CPU picks
// decide where each run's rounding falls: a fixed 1e-4 held on one machine and failed at 2.7e-4
// on another (issue #47). So the yardstick is measured on the same machine, in the same run:
// one-rank runs that differ from the reference only in their summation order (the caller says
// which: micro-batches added in another order, or the batch split into micro-batches another
// way), whose largest distance from the reference over all steps is the `spread`. A run under
// test may differ from the reference by
//
//   kSpreadFactor * spread + kUlpsPerStep * (step + 1) * ulp(reference loss)
//
// kSpreadFactor = 4: the run under test and the variants are draws of the same kind of rounding
// amplified along the same trajectory, so their distances from the reference scatter by a small
// factor and the largest of the variants is the yardstick. Were the distances independent
// half-normal draws (a pessimistic model), the run under test would exceed 4 times the largest
// of n variants with probability 16% for n = 1, 3.7% for 2, 1.1% for 3, 0.4% for 4 (simulated):
// where the runs branch (ResNet) the draws are not independent but fall into families a fixed
// distance apart, and a family no variant reaches breaks that model (4 variants: a Zen 4 put
// FULL_SHARD 6.5x past the farthest), so the caller takes every other order of its micro-batches
// (23 of 4), the largest distance any one-rank order reaches; elsewhere the spread is a few ulps
// and the floor decides. A run perturbed in a way no variant is (a clipping factor an ulp off in
// every gradient at once) can leave the spread: compare runs whose differences are of one kind. kUlpsPerStep = 4: two orders can agree
// exactly (then spread is 0), and each step's logged loss is itself a float32 sum over
// micro-batches that may be ordered differently; a few ulps of the loss per step is what that can
// cost without amplification. A wrong gradient, reduction or update moves the loss by 1e-3 and
// more, orders of magnitude past it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace cadre::test {

// The spacing of float32 numbers at |x|: what one rounding of a logged float32 value can move it.
inline double float32_ulp(double x) {
  const float f = static_cast<float>(std::abs(x));
  return static_cast<double>(std::nextafter(f, INFINITY) - f);
}

class OrderSpread {
 public:
  static constexpr double kSpreadFactor = 4;
  static constexpr double kUlpsPerStep = 4;

  // reference: per-step losses of one rank; variants: one-rank runs of the same function that
  // differ only in their summation order (at least one, each as long as the reference).
  OrderSpread(std::vector<double> reference, const std::vector<std::vector<double>>& variants)
      : reference_(std::move(reference)) {
    EXPECT_FALSE(variants.empty()) << "an order spread needs at least one variant";
    for (const auto& v : variants) {
      EXPECT_EQ(v.size(), reference_.size()) << "a variant logged another number of steps";
      std::vector<double> distances;
      for (size_t i = 0; i < std::min(v.size(), reference_.size()); ++i) {
        distances.push_back(std::abs(v[i] - reference_[i]));
        spread_ = std::max(spread_, distances.back());
      }
      variant_distances_.push_back(distances);
    }
  }

  double spread() const { return spread_; }
  const std::vector<double>& reference() const { return reference_; }
  double bound(size_t step) const {
    return kSpreadFactor * spread_ + kUlpsPerStep * double(step + 1) * float32_ulp(reference_[step]);
  }

  // Every step of `got` within the bound of the reference's; prints the worst use of the bound.
  // `got` starts at the reference's step index `first` (a run resumed there).
  // Returns the largest relative difference.
  double expect_follows(const std::vector<double>& got, const std::string& what, size_t first = 0) const {
    EXPECT_FALSE(got.empty()) << what;
    EXPECT_LE(got.size() + first, reference_.size()) << what;
    double worst_share = 0, worst_relative = 0;
    std::vector<double> distances(first, 0.0);
    for (size_t i = first; i < std::min(got.size() + first, reference_.size()); ++i) {
      const double d = std::abs(got[i - first] - reference_[i]);
      EXPECT_LE(d, bound(i)) << what << " step " << i + 1 << ": " << got[i - first] << " against the reference's "
                             << reference_[i] << "; summation order alone moved one rank by up to " << spread_;
      worst_share = std::max(worst_share, d / bound(i));
      worst_relative = std::max(worst_relative, d / std::abs(reference_[i]));
      distances.push_back(d);
    }
    if (worst_share > 1) {  // where the run and each variant left the reference, step by step
      print_distances(what + ": this run's distances from the reference", distances, first);
      for (const auto& v : variant_distances_) print_distances("  a variant's", v, first);
    }
    std::printf("[order spread] %s: max relative loss difference %.3g, %.2f of the bound (order spread %.3g)\n",
                what.c_str(), worst_relative, worst_share, spread_);
    std::fflush(stdout);
    return worst_relative;
  }

 private:
  static void print_distances(const std::string& label, const std::vector<double>& distances, size_t first) {
    std::printf("[order spread] %s from step %zu:", label.c_str(), first + 1);
    for (size_t i = first; i < distances.size(); ++i) std::printf(" %.2e", distances[i]);
    std::printf("\n");
  }

  std::vector<double> reference_;
  std::vector<std::vector<double>> variant_distances_;  // per step, printed when a run falls outside the bound
  double spread_ = 0;
};

}  // namespace cadre::test
