// Global-norm clipping.
#include "optim/grad_clip.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace cadre {

double grad_sq_norm(const std::vector<at::Tensor>& grads) {
  double total = 0;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) {
      // Per-tensor norms, combined in float64, as PyTorch does; bf16 gradients (ZeRO-1 keeps
      // them in the compute dtype) are summed in float32.
      double n = at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat).item<double>();
      total += n * n;
    }
  return total;
}

void grad_clip_scale(const std::vector<at::Tensor>& grads, double norm, double max_norm) {
  if (max_norm <= 0) return;
  double coef = max_norm / (norm + 1e-6);
  if (coef >= 1.0) return;
  c10::NoGradGuard no_grad;
  for (const auto& g : grads)
    if (g.defined()) g.mul_(coef);
}

}  // namespace cadre
