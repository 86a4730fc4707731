// Judging Cadre's float32 results against PyTorch's through a float64 reference, for the parity
// tests in this folder (llama_parity_test.cpp, resnet_parity_test.cpp) and the batch-invariant
// linear against at::matmul (llama_decode_test.cpp).
//
// Two float32 computations of the same function both miss the exact answer by rounding, and by
// how much depends on the kernels the CPU picks: OpenBLAS, oneDNN and ATen dispatch by
// instruction set, so an AVX-512 machine sums in another order than an AVX2 one. A fixed
// tolerance between the two float32 sides encodes one CPU's rounding (1e-5 did, and failed at
// 1.1e-5 and 1.5e-5 after AdamW on an AVX-512 EPYC). Instead the Python side also runs the same
// inputs in float64, and for every compared tensor, with an error being the largest absolute
// difference from the float64 result divided by that result's largest magnitude S,
//
//   err(Cadre) <= kFactor * max(err(PyTorch), kFloor).
//
// err(PyTorch) is the largest over several PyTorch float32 runs: one from the given inputs and
// the others from inputs moved by one ulp each, in random directions. A float32 run equals an
// exact run on inputs perturbed by a few units of rounding, so these runs sample the spread of
// float32 error on the case. One run is not enough after optimizer steps: where a gradient is
// near Adam's eps, m/(sqrt(v)+eps) amplifies its relative rounding, and a single run's error
// there is luck (one Llama tensor's error measured 1.7e-5 to 3e-4 of S under different OpenBLAS
// kernels, and single-run ratios between equally valid kernel choices reached 8.5).
//
// kFactor = 4: both sides run the same float32 operations in other orders, so their errors come
// from the same distribution. Against the largest of PyTorch's runs, Cadre's ratio measured at
// most 1.32 over 60 combinations of OpenBLAS kernels (SkylakeX, Haswell, Zen, Sandybridge,
// Prescott), ATen's CPU capability (default, AVX2, AVX-512) and oneDNN's ISA (SSE4.1, AVX2,
// AVX-512, with Cadre's linears on oneDNN or not): 4 leaves 3x for machines not measured. Real
// differences put the ratio at 20 and far beyond (mutations tried: weight decay 10% off, lr
// 0.1% off, Adam's eps or beta2, decay on norm weights, RMSNorm eps, rope theta 1% off,
// BatchNorm momentum).
// kFloor = 4 unit roundoffs of float32 (4 * 2^-24 = 2.4e-7 of S): PyTorch can round a scalar
// (the loss, a gradient norm) almost exactly by chance (its loss error measured 0.4 to 1.3 unit
// roundoffs), and Cadre cannot be asked to beat float32 itself: storing a result rounds it once
// (up to 1 unit roundoff) and every element here comes out of reductions of tens to thousands of
// terms, each adding rounding of its own.
//
// The magnitude S. A sum's float32 error is a few unit roundoffs of the sum of its terms'
// magnitudes (Higham, Accuracy and Stability of Numerical Algorithms, 4.2: |fl(sum) - sum| <=
// gamma * sum |t_i|, plus the terms' own errors, each relative to |t_i|), not of the result's
// magnitude. Where the terms cancel, the result is small against them and its error, relative to
// it, is large and decided by the order of the sum: a ResNet's BatchNorm bias gradient is the sum
// of dy over 3,136 positions, nearly zero after the next BatchNorm, and PyTorch's few float32
// runs sampled 2.1e-6 of |ref| there where Cadre's kernels on a Zen 4 CPU (OpenBLAS's default
// kernel for it) gave 8.8e-6: ratio 4.1, both correct float32 sums. So a caller that knows the
// sum behind a tensor passes its condition magnitude (the same sum with every term replaced by
// its absolute value, computed in float64 by the reference) and S is its largest element; the
// floor is then 4 unit roundoffs of the terms' magnitudes, so Cadre may always err by 16 of them
// (kFactor x kFloor): less than a correct sum of n terms can err in its worst order (n - 1 unit
// roundoffs of them, summed in sequence; log2 n pairwise), far less than a wrong term moves it (a
// whole term; the mutations above moved results by 1e-3 of S and more). Without
// it, S = max |ref| (logits, losses, parameters after an update: values whose terms do not
// cancel much, or that are checked through the gradients they come from).
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace cadre::test {

constexpr double kUnitRoundoff = 0x1p-24;  // float32: the relative error of one rounding
constexpr double kFactor = 4;
constexpr double kFloor = 4 * kUnitRoundoff;

// Cadre's and PyTorch's float32 errors against the float64 reference: the largest absolute
// difference divided by the magnitude S (scale).
struct Fp64Errors {
  double cadre = 0, torch = 0, scale = 0;
  double ratio() const { return cadre / std::max(torch, kFloor); }  // must be <= kFactor
};

// torch32: PyTorch's float32 runs (one or more, see the callers); its error is the largest.
// condition: the magnitudes of the terms summed into each element (see S above), or undefined.
inline Fp64Errors fp64_errors(const at::Tensor& cadre, const std::vector<at::Tensor>& torch32, const at::Tensor& ref,
                              const at::Tensor& condition = at::Tensor()) {
  at::Tensor r = ref.to(at::kDouble);
  Fp64Errors e;
  e.scale = r.abs().max().item<double>();
  if (condition.defined()) e.scale = std::max(e.scale, condition.to(at::kDouble).abs().max().item<double>());
  double s = e.scale > 0 ? e.scale : 1.0;  // an all-zero reference: compare absolutely
  e.cadre = (cadre.to(at::kDouble) - r).abs().max().item<double>() / s;
  for (const auto& t : torch32) e.torch = std::max(e.torch, (t.to(at::kDouble) - r).abs().max().item<double>() / s);
  return e;
}

// PyTorch's float32 results for `key` in the Python side's outputs: the run from the given
// inputs (`key`) and the runs from inputs moved by one ulp (`ulp<k>.key`, k < `ulp_runs`).
inline std::vector<at::Tensor> torch32_runs(const std::map<std::string, at::Tensor>& outputs, const std::string& key) {
  const int64_t runs = outputs.at("ulp_runs").item<int64_t>();
  std::vector<at::Tensor> all{outputs.at(key)};
  for (int64_t k = 1; k < runs; ++k) all.push_back(outputs.at("ulp" + std::to_string(k) + "." + key));
  return all;
}

// Checks tensors against the bound and keeps each group's worst ratio for a summary on
// stdout (ctest -V shows it), so the margin on each machine can be read off.
class Fp64Judge {
 public:
  explicit Fp64Judge(std::string label) : label_(std::move(label)) {}

  void check(const std::string& group, const std::string& name, const at::Tensor& cadre,
             const std::vector<at::Tensor>& torch32, const at::Tensor& ref, const at::Tensor& condition = at::Tensor()) {
    ASSERT_EQ(cadre.sizes(), ref.sizes()) << name;
    ASSERT_FALSE(torch32.empty()) << name;
    for (const auto& t : torch32) ASSERT_EQ(t.sizes(), ref.sizes()) << name;
    if (condition.defined()) {
      ASSERT_EQ(condition.sizes(), ref.sizes()) << name << "'s condition magnitudes";
    }
    Fp64Errors e = fp64_errors(cadre, torch32, ref, condition);
    EXPECT_LE(e.ratio(), kFactor) << group << " " << name << ": Cadre's float32 error " << e.cadre
                                  << " of the magnitude " << e.scale << " is more than " << kFactor
                                  << "x PyTorch's " << e.torch << " (floor " << kFloor << ")";
    auto it = std::find_if(groups_.begin(), groups_.end(), [&](const Group& g) { return g.group == group; });
    if (it == groups_.end()) it = groups_.insert(groups_.end(), Group{group, name, e, 0});
    ++it->count;
    if (e.ratio() > it->worst.ratio()) {
      it->worst = e;
      it->name = name;
    }
  }

  // One line per group: the worst ratio and where, both errors relative to the magnitude and
  // absolute, and how many tensors the group has; then the worst ratio overall.
  void print() const {
    double overall = 0;
    for (const auto& g : groups_) {
      const Fp64Errors& w = g.worst;
      std::printf("%s %s (%d): worst Cadre/PyTorch %.2f at %s: errors vs float64 Cadre %.2e, PyTorch %.2e of "
                  "S %.3g (absolute %.2e, %.2e)\n",
                  label_.c_str(), g.group.c_str(), g.count, w.ratio(), g.name.c_str(), w.cadre, w.torch, w.scale,
                  w.cadre * w.scale, w.torch * w.scale);
      overall = std::max(overall, w.ratio());
    }
    std::printf("%s worst ratio %.2f (must be <= %.0f; PyTorch's error floored at %.2e)\n", label_.c_str(), overall,
                kFactor, kFloor);
    std::fflush(stdout);
  }

 private:
  struct Group {
    std::string group, name;
    Fp64Errors worst;
    int count = 0;
  };
  std::string label_;
  std::vector<Group> groups_;
};

}  // namespace cadre::test
