// Rotary position embedding's fused forward and backward on the CPU (see fused_rope.h).
#include "models/fused_rope.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/BFloat16.h>
#include <c10/util/strides.h>
#include <torch/csrc/autograd/custom_function.h>

#include <array>
#include <vector>

#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

constexpr int64_t kMaxHeadDim = 512;  // a bfloat16 row is staged in float32 on the stack

// One float32 row of D: y1 = x1 c1 - x2 s1, y2 = x2 c2 + x1 s2 (halves of D), each product rounded
// to T and then their sum, as x * cos + cat(-x2, x1) * sin rounds in T.
template <typename T>
inline __attribute__((always_inline)) void forward_row(const float* x, const float* c, const float* s, float* y,
                                                       int64_t half) {
  for (int64_t i = 0; i < half; ++i) y[i] = round_as<T>(x[i] * c[i]) + round_as<T>(-x[i + half] * s[i]);
  for (int64_t i = half; i < 2 * half; ++i) y[i] = round_as<T>(x[i] * c[i]) + round_as<T>(x[i - half] * s[i]);
}

// The transpose of the rotation: dx1 = g1 c1 + g2 s2, dx2 = g2 c2 - g1 s1.
inline __attribute__((always_inline)) void backward_row(const float* g, const float* c, const float* s, float* dx,
                                                        int64_t half) {
  for (int64_t i = 0; i < half; ++i) dx[i] = g[i] * c[i] + g[i + half] * s[i + half];
  for (int64_t i = half; i < 2 * half; ++i) dx[i] = g[i] * c[i] - g[i - half] * s[i - half];
}

// A [B, H, T, D] tensor's rows (b, h, t), unit stride in D: where row r starts in `in` and in
// `out`, each by its own strides. Rows are numbered in the memory order of the side that is not
// contiguous (x as the attention's projection makes it: [B, T, H, D] viewed [B, H, T, D]), heads
// inner: that side streams, and the contiguous side is written or read in H streams. Numbered
// (b, h, t) instead, the strided side is read in 128-byte pieces a row of heads apart, which the
// prefetchers do not follow: in a training step that read stalled on memory (measured, perf).
struct RowWalk {
  int64_t H, T, D;
  std::array<int64_t, 3> in_strides, out_strides;
  bool heads_inner;

  struct Row {
    int64_t b, h, t;
  };
  Row row(int64_t r) const {
    if (heads_inner) return {r / (T * H), r % H, (r / H) % T};
    return {r / (T * H), (r / T) % H, r % T};
  }
  static int64_t offset(const Row& i, const std::array<int64_t, 3>& st) {
    return i.b * st[0] + i.h * st[1] + i.t * st[2];
  }
};

// Rows r0..r1 of the forward (x -> y: kForward) or of the backward (g -> dx). The loops are here,
// not in a lambda, so that each clone compiles them for its ISA; bfloat16 rows are staged in
// float32.
using BF16 = c10::BFloat16;

template <bool kForward>
inline __attribute__((always_inline)) void float_row(const float* in, const float* c, const float* s, float* out,
                                                     int64_t half) {
  if (kForward)
    forward_row<float>(in, c, s, out, half);
  else
    backward_row(in, c, s, out, half);
}

template <bool kForward>
inline __attribute__((always_inline)) void rows(const RowWalk& w, const float* in, const float* c, const float* s,
                                                float* out, int64_t r0, int64_t r1) {
  for (int64_t r = r0; r < r1; ++r) {
    const RowWalk::Row i = w.row(r);
    float_row<kForward>(in + RowWalk::offset(i, w.in_strides), c + i.t * w.D, s + i.t * w.D,
                        out + RowWalk::offset(i, w.out_strides), w.D / 2);
  }
}

template <bool kForward>
inline __attribute__((always_inline)) void rows(const RowWalk& w, const BF16* in, const BF16* c, const BF16* s,
                                                BF16* out, int64_t r0, int64_t r1) {
  float fin[kMaxHeadDim], fc[kMaxHeadDim], fs[kMaxHeadDim], fout[kMaxHeadDim];
  int64_t staged_t = -1;  // walked heads inner, a position's H rows share its cos and sin
  for (int64_t r = r0; r < r1; ++r) {
    const RowWalk::Row i = w.row(r);
    widen(in + RowWalk::offset(i, w.in_strides), fin, w.D);
    if (i.t != staged_t) {
      widen(c + i.t * w.D, fc, w.D);
      widen(s + i.t * w.D, fs, w.D);
      staged_t = i.t;
    }
    if (kForward)
      forward_row<BF16>(fin, fc, fs, fout, w.D / 2);
    else
      backward_row(fin, fc, fs, fout, w.D / 2);
    narrow(fout, out + RowWalk::offset(i, w.out_strides), w.D);
  }
}

// Forward (x -> y) or backward (g -> dx) over rows r0..r1, compiled per ISA.
CADRE_CPU_CLONES void rows_f32(bool forward, const RowWalk& w, const float* in, const float* c, const float* s,
                               float* out, int64_t r0, int64_t r1) {
  forward ? rows<true>(w, in, c, s, out, r0, r1) : rows<false>(w, in, c, s, out, r0, r1);
}
CADRE_CPU_CLONES void rows_bf16(bool forward, const RowWalk& w, const BF16* in, const BF16* c, const BF16* s,
                                BF16* out, int64_t r0, int64_t r1) {
  forward ? rows<true>(w, in, c, s, out, r0, r1) : rows<false>(w, in, c, s, out, r0, r1);
}

// in -> out over all rows in parallel, the forward or the backward: [B, H, T, D], float32 or bfloat16.
// `strided` is the side in x's layout (in going forward, out coming back).
void run_rows(bool forward, const at::Tensor& in, const at::Tensor& c, const at::Tensor& s, const at::Tensor& out) {
  const at::Tensor& strided = forward ? in : out;
  const RowWalk w{in.size(1), in.size(2), in.size(3), {in.stride(0), in.stride(1), in.stride(2)},
                  {out.stride(0), out.stride(1), out.stride(2)}, strided.stride(1) < strided.stride(2)};
  const bool f32 = in.scalar_type() == at::kFloat;
  at::parallel_for(0, in.size(0) * w.H * w.T, 64, [&](int64_t r0, int64_t r1) {
    if (f32)
      rows_f32(forward, w, in.data_ptr<float>(), c.data_ptr<float>(), s.data_ptr<float>(), out.data_ptr<float>(), r0,
               r1);
    else
      rows_bf16(forward, w, in.data_ptr<BF16>(), c.data_ptr<BF16>(), s.data_ptr<BF16>(), out.data_ptr<BF16>(), r0, r1);
  });
}

// The strides of a dense tensor of x's sizes: x's own where it is dense (so its gradient comes
// back in its layout), else contiguous.
std::vector<int64_t> dense_strides(const at::Tensor& x) {
  if (x.is_non_overlapping_and_dense()) return x.strides().vec();
  const c10::DimVector contiguous = c10::contiguous_strides(x.sizes());
  return {contiguous.begin(), contiguous.end()};
}

struct FusedRope : public torch::autograd::Function<FusedRope> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x_in, const at::Tensor& cos,
                            const at::Tensor& sin) {
    const at::Tensor x = x_in.stride(3) == 1 ? x_in : x_in.contiguous();
    const at::Tensor c = cos.contiguous(), s = sin.contiguous();
    at::Tensor y = at::empty(x.sizes(), x.options());
    run_rows(/*forward=*/true, x, c, s, y);
    ctx->save_for_backward({c, s});
    ctx->saved_data["x_strides"] = dense_strides(x_in);
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &c = saved[0], &s = saved[1];
    const at::Tensor g = grads[0].stride(3) == 1 ? grads[0] : grads[0].contiguous();
    at::Tensor dx = at::empty_strided(g.sizes(), ctx->saved_data["x_strides"].toIntVector(), g.options());
    run_rows(/*forward=*/false, g, c, s, dx);
    return {dx, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor apply_rope_composite(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  at::Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  return x * cos + at::cat({-x2, x1}, -1) * sin;
}

at::Tensor apply_rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const at::ScalarType t = x.scalar_type();
  const bool shapes = x.dim() == 4 && x.size(3) % 2 == 0 && x.size(3) <= kMaxHeadDim && x.numel() > 0 &&
                      cos.dim() == 2 && cos.sizes() == sin.sizes() && cos.size(0) == x.size(2) && cos.size(1) == x.size(3);
  const bool fused = shapes && x.device().is_cpu() && cos.device().is_cpu() && sin.device().is_cpu() &&
                     (t == at::kFloat || t == at::kBFloat16) && cos.scalar_type() == t && sin.scalar_type() == t &&
                     !cos.requires_grad() && !sin.requires_grad();
  return fused ? FusedRope::apply(x, cos, sin) : apply_rope_composite(x, cos, sin);
}

}  // namespace cadre
