// BatchNorm + residual + ReLU fused on channels-last float32 CPU tensors (see
// fused_batch_norm_relu.h). Channels-last storage is a [rows, C] matrix, rows = N H W: every
// loop here runs along the channels of whole rows (tiles of them), which vectorises, and the
// per-channel sums add rows into one lane per channel, so no clone sums in another order.
#include "models/fused_batch_norm_relu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

// Rows a float32 partial sum covers before it is added into the double ones: each partial adds
// at most 32 terms, so it rounds little, and the partial arrays stay in L1.
constexpr int64_t kBlockRows = 32;

// The loops run over tiles of whole rows at least this many floats long: a ResNet's first
// stages have 16 or 32 channels, too short a loop to vectorise well row by row. Per-channel
// values are repeated to a tile's length (tiled()), so element p of a tile is channel p mod C.
constexpr int64_t kTileFloats = 64;

int64_t tile_length(int64_t C) { return C * std::max<int64_t>(1, kTileFloats / C); }

std::vector<float> tiled(const std::vector<float>& per_channel, int64_t P) {
  std::vector<float> out(P);
  for (int64_t p = 0; p < P; ++p) out[p] = per_channel[p % per_channel.size()];
  return out;
}

inline float relu(float v) { return v < 0.0f ? 0.0f : v; }  // NaN stays NaN, as at::relu

// The gradient through the ReLU: dy where the output is positive (at::threshold_backward's rule).
inline float through_relu(float y, float dy) { return y <= 0.0f ? 0.0f : dy; }

// Calls span(i, n) over rows r0..r1 of a [rows, C] matrix: tiles of n = P floats from element i
// (P / C rows each), then the rows left over one at a time (n = C).
template <typename Span>
inline __attribute__((always_inline)) void for_each_span(int64_t r0, int64_t r1, int64_t C, int64_t P,
                                                         const Span& span) {
  const int64_t m = P / C;
  int64_t r = r0;
  for (; r + m <= r1; r += m) span(r * C, P);
  for (; r < r1; ++r) span(r * C, C);
}

// Adds a tile's P partial sums into the C per-channel ones.
inline __attribute__((always_inline)) void fold(const float* tile, double* per_channel, int64_t C, int64_t P) {
  for (int64_t t = 0; t < P; t += C)
    for (int64_t c = 0; c < C; ++c) per_channel[c] += tile[t + c];
}

// Rows r0..r1 of two per-channel sums: terms(i, p, a, b) adds element i's terms into a tile's
// float32 partials a and b (p: its place in the tile), every kBlockRows rows the partials are
// added into the double sums (block: 2 P floats of scratch).
template <typename Terms>
inline __attribute__((always_inline)) void tiled_sums(int64_t r0, int64_t r1, int64_t C, int64_t P, double* sum_a,
                                                      double* sum_b, float* block, const Terms& terms) {
  float *ba = block, *bb = block + P;
  for (int64_t b = r0; b < r1; b += kBlockRows) {
    std::fill(block, block + 2 * P, 0.0f);
    for_each_span(b, std::min(r1, b + kBlockRows), C, P, [&](int64_t i, int64_t n) __attribute__((always_inline)) {
      for (int64_t p = 0; p < n; ++p) terms(i + p, p, ba[p], bb[p]);
    });
    fold(ba, sum_a, C, P);
    fold(bb, sum_b, C, P);
  }
}

// Rows r0..r1 of x [rows, C]: the per-channel sums of (x - shift) and of its square. Shifting by
// a value of the channel (its first row's) keeps the variance's E[d^2] - E[d]^2 from cancelling
// when a channel's mean is large against its spread.
CADRE_CPU_CLONES void shifted_moments(const float* __restrict x, const float* __restrict shift, int64_t r0,
                                      int64_t r1, int64_t C, int64_t P, double* __restrict sum,
                                      double* __restrict squares, float* __restrict block) {
  tiled_sums(r0, r1, C, P, sum, squares, block,
             [&](int64_t i, int64_t p, float& s, float& q) __attribute__((always_inline)) {
               const float d = x[i] - shift[p];
               s += d;
               q += d * d;
             });
}

// Rows r0..r1 of y = relu(x scale + shift (+ residual)), the per-channel affine map folding the
// statistics, the weight and the bias (libtorch's channels-last kernel computes the same).
CADRE_CPU_CLONES void normalise_rows(const float* __restrict x, const float* __restrict residual,
                                     const float* __restrict scale, const float* __restrict shift, float* __restrict y,
                                     int64_t r0, int64_t r1, int64_t C, int64_t P) {
  for_each_span(r0, r1, C, P, [&](int64_t i, int64_t n) __attribute__((always_inline)) {
    if (residual)
      for (int64_t p = 0; p < n; ++p) y[i + p] = relu(x[i + p] * scale[p] + shift[p] + residual[i + p]);
    else
      for (int64_t p = 0; p < n; ++p) y[i + p] = relu(x[i + p] * scale[p] + shift[p]);
  });
}

// Rows r0..r1 of the backward's reduction: with g the gradient through the ReLU, the per-channel
// sums of g and of g (x - mean).
CADRE_CPU_CLONES void gradient_moments(const float* __restrict dy, const float* __restrict y,
                                       const float* __restrict x, const float* __restrict mean, int64_t r0,
                                       int64_t r1, int64_t C, int64_t P, double* __restrict sum_g,
                                       double* __restrict sum_gx, float* __restrict block) {
  tiled_sums(r0, r1, C, P, sum_g, sum_gx, block,
             [&](int64_t i, int64_t p, float& g_sum, float& gx_sum) __attribute__((always_inline)) {
               const float g = through_relu(y[i], dy[i]);
               g_sum += g;
               gx_sum += g * (x[i] - mean[p]);
             });
}

// Rows r0..r1 of the input gradients: dx = (g - (x - mean) k - mean_g) scale, and the
// residual's, g itself; either null when not wanted. k = sum(g (x - mean)) invstd^2 / rows and
// scale = invstd weight, as in libtorch's channels-last backward.
CADRE_CPU_CLONES void gradient_rows(const float* __restrict dy, const float* __restrict y,
                                    const float* __restrict x, const float* __restrict mean,
                                    const float* __restrict k, const float* __restrict mean_g,
                                    const float* __restrict scale, float* __restrict dx, float* __restrict dres,
                                    int64_t r0, int64_t r1, int64_t C, int64_t P) {
  for_each_span(r0, r1, C, P, [&](int64_t i, int64_t n) __attribute__((always_inline)) {
    if (dres)
      for (int64_t p = 0; p < n; ++p) dres[i + p] = through_relu(y[i + p], dy[i + p]);
    if (dx)
      for (int64_t p = 0; p < n; ++p)
        dx[i + p] = (through_relu(y[i + p], dy[i + p]) - (x[i + p] - mean[p]) * k[p] - mean_g[p]) * scale[p];
  });
}

// Two per-channel sums over all rows: `rows_sum(r0, r1, a, b, block)` adds rows r0..r1 into a
// and b (C doubles each; block: 2 P floats of scratch). Runs in one chunk of rows per thread,
// the chunks' sums added in order, so a result does not depend on the threads' timing.
template <typename RowsSum>
void channel_sums(int64_t rows, int64_t C, const RowsSum& rows_sum, std::vector<double>& a, std::vector<double>& b) {
  const int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(at::get_num_threads(), rows / kBlockRows));
  std::vector<double> parts(chunks * 2 * C, 0.0);
  at::parallel_for(0, chunks, 1, [&](int64_t k0, int64_t k1) {
    std::vector<float> block(2 * tile_length(C));
    for (int64_t k = k0; k < k1; ++k)
      rows_sum(rows * k / chunks, rows * (k + 1) / chunks, &parts[k * 2 * C], &parts[k * 2 * C + C], block.data());
  });
  a.assign(C, 0.0);
  b.assign(C, 0.0);
  for (int64_t k = 0; k < chunks; ++k)
    for (int64_t c = 0; c < C; ++c) {
      a[c] += parts[k * 2 * C + c];
      b[c] += parts[k * 2 * C + C + c];
    }
}

// running = (1 - momentum) running + momentum value, in place on a float32 buffer (if defined).
void move_towards(const at::Tensor& running, const std::vector<double>& value, double momentum) {
  if (!running.defined()) return;
  float* r = running.data_ptr<float>();
  for (size_t c = 0; c < value.size(); ++c) r[c] = static_cast<float>((1.0 - momentum) * r[c] + momentum * value[c]);
}

// An empty float32 [N, C, H, W] tensor stored channels-last, like x.
at::Tensor empty_channels_last(const at::Tensor& x) {
  return at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::ChannelsLast));
}

// A batch's per-channel mean and (biased) variance, in double.
struct BatchStatistics {
  std::vector<double> mean, var;
};

BatchStatistics batch_statistics(const float* x, int64_t rows, int64_t C) {
  const std::vector<float> first_row(x, x + C);
  const int64_t P = tile_length(C);
  const std::vector<float> shift = tiled(first_row, P);
  std::vector<double> sum, squares;
  channel_sums(rows, C, [&](int64_t r0, int64_t r1, double* s, double* q, float* block) {
    shifted_moments(x, shift.data(), r0, r1, C, P, s, q, block);
  }, sum, squares);
  BatchStatistics st{std::vector<double>(C), std::vector<double>(C)};
  for (int64_t c = 0; c < C; ++c) {
    const double shifted_mean = sum[c] / double(rows);
    st.mean[c] = first_row[c] + shifted_mean;
    st.var[c] = std::max(0.0, squares[c] / double(rows) - shifted_mean * shifted_mean);
  }
  return st;
}

// The running statistics the forward updates: buffers, not inputs autograd differentiates (in a
// struct: autograd::Function records each tensor input's device, and an undefined one has none).
struct RunningStatistics {
  at::Tensor mean, var;  // either undefined when not tracked
};

// In the residual's place when there is none (for the same reason).
struct NoResidual {};

struct FusedBatchNormRelu : public torch::autograd::Function<FusedBatchNormRelu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, NoResidual, const RunningStatistics& running, double momentum,
                            double eps) {
    return forward(ctx, x, weight, bias, at::Tensor(), running, momentum, eps);
  }

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& residual, const RunningStatistics& running,
                            double momentum, double eps) {
    const int64_t C = x.size(1), rows = x.numel() / C;
    const float *xp = x.data_ptr<float>(), *w = weight.data_ptr<float>(), *b = bias.data_ptr<float>();
    BatchStatistics st = batch_statistics(xp, rows, C);
    at::Tensor mean = at::empty({C}, x.options()), invstd = at::empty({C}, x.options());
    float *mp = mean.data_ptr<float>(), *ip = invstd.data_ptr<float>();
    std::vector<float> scale(C), shift(C);
    for (int64_t c = 0; c < C; ++c) {
      mp[c] = static_cast<float>(st.mean[c]);
      ip[c] = static_cast<float>(1.0 / std::sqrt(st.var[c] + eps));
      scale[c] = ip[c] * w[c];
      shift[c] = b[c] - mp[c] * scale[c];
      st.var[c] *= double(rows) / double(rows - 1);  // the running variance is the unbiased one
    }
    move_towards(running.mean, st.mean, momentum);
    move_towards(running.var, st.var, momentum);

    const at::Tensor res = residual.defined() ? residual.contiguous(at::MemoryFormat::ChannelsLast) : residual;
    const float* rp = res.defined() ? res.data_ptr<float>() : nullptr;
    at::Tensor y = empty_channels_last(x);
    float* yp = y.data_ptr<float>();
    const int64_t P = tile_length(C);
    const std::vector<float> scale_tiles = tiled(scale, P), shift_tiles = tiled(shift, P);
    at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
      normalise_rows(xp, rp, scale_tiles.data(), shift_tiles.data(), yp, r0, r1, C, P);
    });
    ctx->save_for_backward({x, y, weight, mean, invstd});
    ctx->saved_data["residual"] = residual.defined();  // needs_input_grad counts tensor inputs only
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &y = saved[1], &weight = saved[2], &mean = saved[3], &invstd = saved[4];
    const at::Tensor dy = grads[0].contiguous(at::MemoryFormat::ChannelsLast);
    const int64_t C = x.size(1), rows = x.numel() / C;
    const float *dyp = dy.data_ptr<float>(), *yp = y.data_ptr<float>(), *xp = x.data_ptr<float>();
    const float *ip = invstd.data_ptr<float>(), *w = weight.data_ptr<float>();
    const int64_t P = tile_length(C);
    const std::vector<float> mean_tiles = tiled(std::vector<float>(mean.data_ptr<float>(), mean.data_ptr<float>() + C), P);
    std::vector<double> sum_g, sum_gx;
    channel_sums(rows, C, [&](int64_t r0, int64_t r1, double* g, double* gx, float* block) {
      gradient_moments(dyp, yp, xp, mean_tiles.data(), r0, r1, C, P, g, gx, block);
    }, sum_g, sum_gx);

    at::Tensor dweight = ctx->needs_input_grad(1) ? at::empty({C}, weight.options()) : at::Tensor();
    at::Tensor dbias = ctx->needs_input_grad(2) ? at::empty({C}, weight.options()) : at::Tensor();
    std::vector<float> k(C), mean_g(C), scale(C);
    for (int64_t c = 0; c < C; ++c) {
      if (dweight.defined()) dweight.data_ptr<float>()[c] = static_cast<float>(sum_gx[c] * ip[c]);
      if (dbias.defined()) dbias.data_ptr<float>()[c] = static_cast<float>(sum_g[c]);
      k[c] = static_cast<float>(sum_gx[c] * ip[c] * ip[c] / double(rows));
      mean_g[c] = static_cast<float>(sum_g[c] / double(rows));
      scale[c] = ip[c] * w[c];
    }
    at::Tensor dx = ctx->needs_input_grad(0) ? empty_channels_last(x) : at::Tensor();
    const bool residual = ctx->saved_data["residual"].toBool();
    at::Tensor dres = residual && ctx->needs_input_grad(3) ? empty_channels_last(x) : at::Tensor();
    float* dxp = dx.defined() ? dx.data_ptr<float>() : nullptr;
    float* drp = dres.defined() ? dres.data_ptr<float>() : nullptr;
    const std::vector<float> k_tiles = tiled(k, P), mean_g_tiles = tiled(mean_g, P), scale_tiles = tiled(scale, P);
    if (dxp || drp)
      at::parallel_for(0, rows, 64, [&](int64_t r0, int64_t r1) {
        gradient_rows(dyp, yp, xp, mean_tiles.data(), k_tiles.data(), mean_g_tiles.data(), scale_tiles.data(), dxp,
                      drp, r0, r1, C, P);
      });
    return {dx, dweight, dbias, dres, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool float_cpu(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat; }

// Whether the fused kernel takes this call (see the header); the rest go to libtorch's ops.
bool fusable(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const at::Tensor& residual,
             const at::Tensor& running_mean, const at::Tensor& running_var, bool training) {
  if (!training || x.dim() != 4 || !float_cpu(x) || !x.is_contiguous(at::MemoryFormat::ChannelsLast)) return false;
  const int64_t C = x.size(1);
  // One value per channel has no variance: libtorch's ops raise their own error for it.
  if (C == 0 || x.numel() / C < 2) return false;
  for (const at::Tensor* p : {&weight, &bias})
    if (!p->defined() || !float_cpu(*p) || !p->is_contiguous() || p->numel() != C) return false;
  for (const at::Tensor* p : {&running_mean, &running_var})
    if (p->defined() && (!float_cpu(*p) || !p->is_contiguous() || p->numel() != C)) return false;
  return !residual.defined() || (float_cpu(residual) && residual.sizes() == x.sizes());
}

}  // namespace

at::Tensor batch_norm_relu_composite(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                     const at::Tensor& residual, const at::Tensor& running_mean,
                                     const at::Tensor& running_var, bool training, double momentum, double eps) {
  at::Tensor out = at::batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps,
                                  at::globalContext().userEnabledCuDNN());
  return at::relu(residual.defined() ? out + residual : out);
}

at::Tensor batch_norm_relu(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                           const at::Tensor& residual, const at::Tensor& running_mean, const at::Tensor& running_var,
                           bool training, double momentum, double eps) {
  if (!fusable(x, weight, bias, residual, running_mean, running_var, training))
    return batch_norm_relu_composite(x, weight, bias, residual, running_mean, running_var, training, momentum, eps);
  const RunningStatistics running{running_mean, running_var};
  return residual.defined() ? FusedBatchNormRelu::apply(x, weight, bias, residual, running, momentum, eps)
                            : FusedBatchNormRelu::apply(x, weight, bias, NoResidual{}, running, momentum, eps);
}

at::Tensor batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const at::Tensor& x, const at::Tensor& residual) {
  const torch::nn::BatchNormOptions& o = bn.options;
  double factor = o.momentum().value_or(0.0);
  if (bn.is_training() && o.track_running_stats() && bn.num_batches_tracked.defined()) {
    bn.num_batches_tracked += 1;
    if (!o.momentum()) factor = 1.0 / bn.num_batches_tracked.item<double>();  // a cumulative average
  }
  return batch_norm_relu(x, bn.weight, bn.bias, residual, bn.running_mean, bn.running_var,
                         bn.is_training() || !o.track_running_stats(), factor, o.eps());
}

}  // namespace cadre
