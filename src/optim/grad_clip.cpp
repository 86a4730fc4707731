// Global-norm clipping.
#include "optim/grad_clip.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

namespace cadre {

double grad_sq_norm(const std::vector<at::Tensor>& grads) {
  // Per-tensor norms, combined in float64, as PyTorch does; bf16 gradients (ZeRO-1 keeps them
  // in the compute dtype) are summed in float32. The norms are computed where the gradients
  // live and read back together: one host synchronisation on a GPU, not one per tensor.
  std::vector<at::Tensor> norms;
  for (const auto& g : grads)
    if (g.defined() && g.numel() > 0) norms.push_back(at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kFloat));
  if (norms.empty()) return 0;
  const at::Tensor host = at::stack(norms).to(at::kCPU);
  const float* n = host.data_ptr<float>();
  double total = 0;
  for (int64_t i = 0; i < host.numel(); ++i) total += double(n[i]) * double(n[i]);
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
