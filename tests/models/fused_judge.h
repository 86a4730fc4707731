// Judging a fused CPU kernel against the same function through libtorch's ops, both against
// float64 with fp64_judge.h's measure (it says why through float64 and not one against the other):
// the fused result's error may be up to 4 times the composite's, or 4 unit roundoffs of the dtype
// where the composite rounds almost exactly by chance.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "fp64_judge.h"

namespace fused_judge {

using Inputs = std::vector<at::Tensor>;
using Function = std::function<at::Tensor(const Inputs&)>;

struct Results {
  at::Tensor y;                  // float64 copy of the output
  std::vector<at::Tensor> grads;  // float64 copies of the inputs' gradients, in order
};

// y = f(inputs in dtype) and the gradients of sum(y * g) for every input, in float64.
inline Results run(const Function& f, const Inputs& inputs, const at::Tensor& g, at::ScalarType dtype) {
  Inputs in;
  for (const at::Tensor& x : inputs) in.push_back(x.to(dtype).detach().requires_grad_(true));
  at::Tensor y = f(in);
  std::vector<at::Tensor> grads = torch::autograd::grad({y}, in, {g.to(y.scalar_type())});
  Results r{y.detach().to(at::kDouble), {}};
  for (const at::Tensor& d : grads) r.grads.push_back(d.to(at::kDouble));
  return r;
}

// The error measure is fp64_judge.h's (largest |a - ref| over ref's largest magnitude), with
// the composite in PyTorch's place and a floor of 4 unit roundoffs of the dtype under test.
inline void expect_judged(const std::string& what, const at::Tensor& fused, const at::Tensor& composite,
                          const at::Tensor& exact, double unit_roundoff) {
  const cadre::test::Fp64Errors e = cadre::test::fp64_errors(fused, {composite}, exact);
  EXPECT_LE(e.cadre, cadre::test::kFactor * std::max(e.torch, 4 * unit_roundoff))
      << what << ": fused error " << e.cadre << ", libtorch's ops " << e.torch;
}

inline double unit_roundoff(at::ScalarType dtype) { return dtype == at::kBFloat16 ? 0x1p-8 : 0x1p-24; }

// The fused function's output and every gradient judged against the composite's in `dtype`.
inline void expect_as_accurate(const std::string& name, const Function& fused, const Function& composite,
                               const Inputs& inputs, const at::Tensor& g, at::ScalarType dtype) {
  const Results exact = run(composite, inputs, g, at::kDouble);
  const Results f = run(fused, inputs, g, dtype), c = run(composite, inputs, g, dtype);
  const std::string what = name + " " + std::string(c10::toString(dtype));
  expect_judged(what + " output", f.y, c.y, exact.y, unit_roundoff(dtype));
  for (size_t i = 0; i < inputs.size(); ++i)
    expect_judged(what + " gradient " + std::to_string(i), f.grads[i], c.grads[i], exact.grads[i],
                  unit_roundoff(dtype));
}

}  // namespace fused_judge
