// SGD with momentum, dampening, Nesterov and L2 weight decay over a list of tensors (whole
// parameters, or the flat shards a rank owns under FSDP). The update matches torch.optim.SGD
// term for term, including its first step, where the momentum buffer starts as the gradient
// itself (no dampening):
//   g = grad + weight_decay * p                      (parameters with decay only)
//   buf = g on a parameter's first step, else momentum * buf + (1 - dampening) * g
//   g = g + momentum * buf (nesterov) or buf         (when momentum != 0)
//   p = p - lr * g
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "optim/optimizer.h"

namespace cadre {

struct SgdOptions {
  double momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// Throws ConfigError naming optim.<key> for what torch.optim.SGD refuses (negative momentum or
// weight decay, Nesterov without momentum or with dampening), and for momentum >= 1 or
// dampening outside [0, 1], under which the buffer grows without bound or changes sign.
void sgd_options_check(const SgdOptions& options);

class Sgd : public Optimizer {
 public:
  // `decay[i]` says whether params[i] gets weight decay. Gradients are read from
  // params[i].grad(); the momentum buffers are float32 like the parameters.
  Sgd(std::vector<at::Tensor> params, std::vector<bool> decay, SgdOptions options);

  void step(double lr) override;
  int64_t steps() const override { return step_; }
  // A restored optimizer (steps > 0) has its buffers: the next step uses them.
  void set_steps(int64_t steps) override;
  // momentum_buffer per parameter (torch.optim.SGD's name); none without momentum.
  std::vector<OptimizerState> state() override;
  int64_t state_bytes_per_param() const override { return options_.momentum != 0 ? 4 : 0; }

  std::vector<at::Tensor>& momentum_buffer() { return momentum_buffer_; }

 private:
  void step_op_by_op(size_t i, double lr, bool first);

  std::vector<at::Tensor> params_, momentum_buffer_;
  std::vector<bool> decay_;
  std::vector<bool> has_buffer_;  // torch's "buffer is None" before a parameter's first step
  SgdOptions options_;
  int64_t step_ = 0;
};

}  // namespace cadre
