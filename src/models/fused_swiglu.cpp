// SwiGLU's fused forward and backward on the CPU (see fused_swiglu.h).
#include "models/fused_swiglu.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>

#include "core/torch_compat.h"
#include "models/cpu_vector_math.h"

namespace cadre {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

using BF16 = c10::BFloat16;

constexpr int64_t kGrain = 1 << 15;  // elements per task: large enough to amortise the task
constexpr int64_t kStage = 512;      // bfloat16 elements staged in float32 at a time: in L1
// The staging arrays' distance apart, one cache line more than they hold: at 2 KiB apart, a
// store to one and a load from another 4 KiB away matched in the low address bits the CPU
// compares first (4K aliasing): the bfloat16 backward took 5.0 ms instead of 3.3. (The
// RMSNorm's and the loss's staging, D and V floats apart, showed no such cost when padded.)
constexpr int64_t kStageStride = kStage + 16;

inline float sigmoid(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

inline __attribute__((always_inline)) void forward_block(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * sigmoid(a[i]) * b[i];
}

// d/da silu(a) = s (1 + a (1 - s)) with s = sigmoid(a); the product's gradients are g b and
// g silu(a).
inline __attribute__((always_inline)) void backward_block(const float* a, const float* b, const float* g, float* da,
                                                          float* db, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float s = sigmoid(a[i]);
    da[i] = g[i] * b[i] * (s * (1.0f + a[i] * (1.0f - s)));
    db[i] = g[i] * (a[i] * s);
  }
}

CADRE_CPU_CLONES void forward_elements(const float* a, const float* b, float* y, int64_t n) {
  forward_block(a, b, y, n);
}

CADRE_CPU_CLONES void backward_elements(const float* a, const float* b, const float* g, float* da, float* db,
                                        int64_t n) {
  backward_block(a, b, g, da, db, n);
}

// bfloat16 staged through float32 a block at a time (GCC vectorises mixed 16/32-bit loops
// poorly), each result rounded once: libtorch's ops round silu(a) before the product. Run on
// 1.x only (swiglu_fused_on_cpu): 6.5 ms forward and backward at [2048, 1536], one thread,
// against 1.13's silu and products' 19.7 and 2.11's 5.9 (bench/fused_kernels).
CADRE_CPU_CLONES void forward_elements(const BF16* a, const BF16* b, BF16* y, int64_t n) {
  float stage[3][kStageStride];
  float *fa = stage[0], *fb = stage[1], *fy = stage[2];
  for (int64_t i = 0; i < n; i += kStage) {
    const int64_t m = std::min(kStage, n - i);
    widen(a + i, fa, m);
    widen(b + i, fb, m);
    forward_block(fa, fb, fy, m);
    narrow(fy, y + i, m);
  }
}

CADRE_CPU_CLONES void backward_elements(const BF16* a, const BF16* b, const BF16* g, BF16* da, BF16* db, int64_t n) {
  float stage[5][kStageStride];
  float *fa = stage[0], *fb = stage[1], *fg = stage[2], *fda = stage[3], *fdb = stage[4];
  for (int64_t i = 0; i < n; i += kStage) {
    const int64_t m = std::min(kStage, n - i);
    widen(a + i, fa, m);
    widen(b + i, fb, m);
    widen(g + i, fg, m);
    backward_block(fa, fb, fg, fda, fdb, m);
    narrow(fda, da + i, m);
    narrow(fdb, db + i, m);
  }
}

// All elements in parallel, T the tensors' element type (float or bfloat16).
template <typename T>
void forward_all(const T* a, const T* b, T* y, int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t i0, int64_t i1) { forward_elements(a + i0, b + i0, y + i0, i1 - i0); });
}

template <typename T>
void backward_all(const T* a, const T* b, const T* g, T* da, T* db, int64_t n) {
  at::parallel_for(0, n, kGrain, [&](int64_t i0, int64_t i1) {
    backward_elements(a + i0, b + i0, g + i0, da + i0, db + i0, i1 - i0);
  });
}

struct FusedSwiglu : public torch::autograd::Function<FusedSwiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    at::Tensor ac = a.contiguous(), bc = b.contiguous();
    at::Tensor y = at::empty_like(ac, at::MemoryFormat::Contiguous);
    if (ac.scalar_type() == at::kFloat)
      forward_all(ac.data_ptr<float>(), bc.data_ptr<float>(), y.data_ptr<float>(), ac.numel());
    else
      forward_all(ac.data_ptr<BF16>(), bc.data_ptr<BF16>(), y.data_ptr<BF16>(), ac.numel());
    ctx->save_for_backward({ac, bc});
    return y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &a = saved[0], &b = saved[1];
    const at::Tensor g = grads[0].contiguous();
    at::Tensor da = at::empty_like(a), db = at::empty_like(b);
    if (a.scalar_type() == at::kFloat)
      backward_all(a.data_ptr<float>(), b.data_ptr<float>(), g.data_ptr<float>(), da.data_ptr<float>(),
                   db.data_ptr<float>(), a.numel());
    else
      backward_all(a.data_ptr<BF16>(), b.data_ptr<BF16>(), g.data_ptr<BF16>(), da.data_ptr<BF16>(),
                   db.data_ptr<BF16>(), a.numel());
    return {ctx->needs_input_grad(0) ? da : at::Tensor(), ctx->needs_input_grad(1) ? db : at::Tensor()};
  }
};

}  // namespace

at::Tensor swiglu_composite(const at::Tensor& a, const at::Tensor& b) { return at::silu(a) * b; }

bool swiglu_fused_on_cpu(at::ScalarType dtype) {
  return dtype == at::kFloat || (dtype == at::kBFloat16 && !CADRE_TORCH_FAST_BF16_SILU);
}

at::Tensor swiglu_fused(const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType t = a.scalar_type();
  TORCH_CHECK(a.device().is_cpu() && b.device().is_cpu() && (t == at::kFloat || t == at::kBFloat16) &&
                  b.scalar_type() == t && a.sizes() == b.sizes(),
              "swiglu_fused: needs float32 or bfloat16 CPU tensors of one dtype and shape, got ", a.toString(), " ",
              a.sizes(), " and ", b.toString(), " ", b.sizes());
  return FusedSwiglu::apply(a, b);
}

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
  const at::ScalarType t = a.scalar_type();
  const bool fused = a.device().is_cpu() && b.device().is_cpu() && swiglu_fused_on_cpu(t) && b.scalar_type() == t &&
                     a.sizes() == b.sizes() && a.numel() > 0;
  return fused ? swiglu_fused(a, b) : swiglu_composite(a, b);
}

}  // namespace cadre
