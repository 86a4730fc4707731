// AdamW with decoupled weight decay over a list of tensors (whole parameters, or the flat
// shards a rank owns under FSDP). The update matches torch.optim.AdamW term for term.
#pragma once

#include <ATen/core/Tensor.h>

#include <unordered_map>
#include <vector>

#include "optim/optimizer.h"

namespace cadre {

struct AdamWOptions {
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.1;
  // Tensors off the CPU take libtorch's multi-tensor kernels (at::_fused_adamw_ on 2.x, the
  // _foreach_* ops on 1.13); float32 CPU tensors take Cadre's one-pass loop. For tests: CPU
  // tensors take the multi-tensor path too.
  bool multi_tensor_on_cpu = false;
};

class AdamW : public Optimizer {
 public:
  // `decay[i]` says whether params[i] gets weight decay. Gradients are read from
  // params[i].grad(); state tensors are float32 like the parameters.
  AdamW(std::vector<at::Tensor> params, std::vector<bool> decay, AdamWOptions options);

  void step(double lr) override;
  int64_t steps() const override { return step_; }
  void set_steps(int64_t step) override { step_ = step; }
  // The moment estimates per parameter: exp_avg, exp_avg_sq (torch.optim.AdamW's names).
  std::vector<OptimizerState> state() override { return {{"exp_avg", &exp_avg_}, {"exp_avg_sq", &exp_avg_sq_}}; }
  int64_t state_bytes_per_param() const override { return 8; }

  std::vector<at::Tensor>& exp_avg() { return exp_avg_; }
  std::vector<at::Tensor>& exp_avg_sq() { return exp_avg_sq_; }

 private:
  bool takes_cpu_loop(size_t i) const;
  void step_multi_tensor(const std::vector<size_t>& which, double lr);
  void step_one_by_one(size_t i, double lr);
  at::Tensor& step_count(const at::Device& device);

  std::vector<at::Tensor> params_, exp_avg_, exp_avg_sq_;
  // The step as the fused kernel reads it: one float32 scalar per device, shared by all of that
  // device's parameters, refilled from step_ before each step (so set_steps needs no care).
  std::unordered_map<at::Device, at::Tensor> step_counts_;
  std::vector<bool> decay_;
  AdamWOptions options_;
  int64_t step_ = 0;
};

}  // namespace cadre
