// The linear whose weight gradient goes straight into .grad (models/linear_grad_into_weight.h).
//
// With a buffer as the weight's .grad, a head tied to an embedding (embedding_rows) leaves the
// buffer holding what autograd would have added into it: judged against float64, where each
// element is the buffer's value plus a GEMM's sum over M tokens plus the embedding's rows. A
// float32 GEMM lies within M 2^-24 of the sum of its terms' magnitudes (float32 accumulation in
// bf16 GEMMs too), and every store into the buffer rounds once more (2^-24 relative in float32,
// 2^-8 in bf16; two stores: the head's, then the rows'). The weight's AccumulateGrad still runs
// once. Without a buffer the gradients are linear_no_bias's, bit for bit. And the memory claim:
// no dense vocabulary x dim gradient is made beside the buffer.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include <cmath>
#include <fstream>

#include "core/sysinfo.h"
#include "models/dnnl_linear.h"
#include "models/embedding_rows.h"
#include "models/linear_grad_into_weight.h"

namespace {

struct Tied {
  at::Tensor tokens, x0, r;
};

// loss = sum(r * head(embedding(tokens) + x0)) with the head tied to the embedding.
at::Tensor tied_loss(const at::Tensor& weight, const Tied& in, bool into_grad) {
  const at::Tensor h = cadre::embedding_rows(weight, in.tokens) + in.x0;
  const at::Tensor y = into_grad ? cadre::linear_grad_into_weight(h, weight) : cadre::linear_no_bias(h, weight);
  return (y * in.r).sum();
}

// The accumulator is returned to be kept: a tensor holds its AccumulateGrad node only weakly.
std::shared_ptr<torch::autograd::Node> count_accumulations(const at::Tensor& weight, std::shared_ptr<int> count) {
  auto acc = torch::autograd::impl::grad_accumulator(weight);
  acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [count](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
        ++*count;
        return outputs;
      }));
  return acc;
}

void expect_tied_gradients_added_into_the_buffer(at::ScalarType dtype) {
  at::manual_seed(11);
  const int64_t V = 40, D = 24, B = 2, T = 9, M = B * T;
  Tied in{at::randint(0, V, {B, T}, at::kLong), at::randn({B, T, D}), at::randn({B, T, V})};
  {
    const at::Tensor w0 = at::randn({V, D}).to(dtype), start = at::randn({V, D}).to(dtype);
    Tied typed{in.tokens, in.x0.to(dtype), in.r.to(dtype)};
    at::Tensor weight = w0.clone().requires_grad_(true);
    at::Tensor buffer = start.clone();
    weight.mutable_grad() = buffer;
    auto accumulated = std::make_shared<int>(0);
    const auto accumulator = count_accumulations(weight, accumulated);
    tied_loss(weight, typed, true).backward();
    EXPECT_EQ(*accumulated, 1) << "the weight's AccumulateGrad ran once";
    EXPECT_TRUE(weight.grad().is_same(buffer)) << ".grad is still the buffer";
    // float64: the head's term sum_m g[m, v] h[m, d] and the rows' sum over positions of (g W)[m].
    const at::Tensor h = (at::embedding(w0, in.tokens) + typed.x0).to(at::kDouble).reshape({M, D});
    const at::Tensor g = typed.r.to(at::kDouble).reshape({M, V}), w = w0.to(at::kDouble);
    const at::Tensor head = g.t().mm(h), head_mag = g.abs().t().mm(h.abs());
    const at::Tensor dh = g.mm(w), dh_mag = g.abs().mm(w.abs());
    const at::Tensor rows = at::zeros({V, D}, at::kDouble).index_add_(0, in.tokens.reshape({-1}), dh);
    const at::Tensor rows_mag = at::zeros({V, D}, at::kDouble).index_add_(0, in.tokens.reshape({-1}), dh_mag);
    const at::Tensor want = start.to(at::kDouble) + head + rows;
    const at::Tensor magnitude = start.to(at::kDouble).abs() + head_mag + rows_mag;
    const double store = dtype == at::kFloat ? std::ldexp(1.0, -24) : std::ldexp(1.0, -8);
    const double bound_scale = (M + V) * std::ldexp(1.0, -24) + 2 * store;
    const at::Tensor err = (buffer.to(at::kDouble) - want).abs();
    EXPECT_TRUE((err <= magnitude * bound_scale).all().item<bool>())
        << "worst error " << err.max().item<double>() << " at bound " << (magnitude * bound_scale).min().item<double>();
  }
}

// One test per dtype: the kernel-choice matrix (tests/kernels) runs the float32 one where a
// choice cannot run bf16 matmuls.
TEST(LinearGradIntoWeight, ATiedHeadAndEmbeddingAddIntoTheBufferAsAutogradWouldInFloat32) {
  expect_tied_gradients_added_into_the_buffer(at::kFloat);
}

TEST(LinearGradIntoWeight, ATiedHeadAndEmbeddingAddIntoTheBufferAsAutogradWouldInBf16) {
  expect_tied_gradients_added_into_the_buffer(at::kBFloat16);
}

TEST(LinearGradIntoWeight, WithoutABufferTheGradientsAreLinearNoBiassBitForBit) {
  at::manual_seed(12);
  const int64_t V = 33, D = 20;
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    SCOPED_TRACE(dtype == at::kFloat ? "float32" : "bfloat16");
    const at::Tensor w0 = at::randn({V, D}).to(dtype), x0 = at::randn({3, 5, D}).to(dtype);
    const at::Tensor r = at::randn({3, 5, V}).to(dtype);
    at::Tensor w1 = w0.clone().requires_grad_(true), x1 = x0.clone().requires_grad_(true);
    at::Tensor w2 = w0.clone().requires_grad_(true), x2 = x0.clone().requires_grad_(true);
    (cadre::linear_grad_into_weight(x1, w1) * r).sum().backward();
    (cadre::linear_no_bias(x2, w2) * r).sum().backward();
    EXPECT_TRUE(at::equal(cadre::linear_grad_into_weight(x0, w0), cadre::linear_no_bias(x0, w0)));
    ASSERT_FALSE(w1.grad().is_sparse());
    EXPECT_TRUE(at::equal(w1.grad(), w2.grad()));
    EXPECT_TRUE(at::equal(x1.grad(), x2.grad()));
  }
}

// A 256 MiB float32 table: the old way held the head's dense gradient until the embedding's
// arrived and then a dense sum of the two, 512 MiB beside the buffer; here the peak grows by
// the logits and their gradient (64 x 65536 floats, 16 MiB each) and little more.
TEST(LinearGradIntoWeight, NoDenseGradientIsMadeBesideTheBuffer) {
  // One thread: allocations from several threads can land in several malloc arenas, whose
  // freed blocks another thread's allocation does not reuse, which would make the peak depend
  // on timing.
  at::set_num_threads(1);
  const int64_t V = 65536, D = 1024, T = 64;
  Tied in{at::randint(0, V, {1, T}, at::kLong), at::randn({1, T, D}), at::randn({1, T, V})};
  at::Tensor weight = at::randn({V, D}).requires_grad_(true);
  weight.mutable_grad() = at::zeros({V, D});
  std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM starts again from VmRSS
  const int64_t before = cadre::process_peak_rss_bytes();
  tied_loss(weight, in, true).backward();
  const int64_t grown = cadre::process_peak_rss_bytes() - before, table = V * D * 4;
  EXPECT_LT(grown, table / 2) << "peak grew by " << (grown >> 20) << " MiB for a " << (table >> 20) << " MiB table";
}

}  // namespace
