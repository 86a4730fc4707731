// AdamW with decoupled weight decay over a list of tensors (whole parameters, or the flat
// shards a rank owns under FSDP). The update matches torch.optim.AdamW term for term.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

namespace cadre {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
};

class AdamW {
 public:
  // `decay[i]` says whether params[i] gets weight decay. Gradients are read from
  // params[i].grad(); state tensors are float32 like the parameters.
  AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, AdamWOptions options);

  void step(double lr);
  int64_t steps() const { return step_; }

  // State for checkpoints: moment estimates per parameter and the step count.
  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }
  void set_steps(int64_t step) { step_ = step; }

 private:
  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace cadre
