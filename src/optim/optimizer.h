// What the trainer needs from an optimizer (AdamW, SGD): a step at a learning rate, the step
// count, and its per-parameter state tensors by name, which checkpoints store as
// optim.<state>.<param> and shard exactly like the parameters they belong to.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

// One kind of state: a float32 tensor per parameter, shaped like it (e.g. AdamW's exp_avg).
struct OptimizerState {
  std::string name;
  std::vector<at::Tensor>* tensors;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Updates every parameter that has a gradient (read from params[i].grad()).
  virtual void step(double lr) = 0;
  virtual int64_t steps() const = 0;
  // After loading a checkpoint: the step count it was written at.
  virtual void set_steps(int64_t steps) = 0;
  // The state to checkpoint and restore, in a fixed order; empty when the optimizer keeps none
  // (SGD without momentum).
  virtual std::vector<OptimizerState> state() = 0;
  // Bytes of state per parameter element (AdamW 8, SGD with momentum 4, plain SGD 0).
  virtual int64_t state_bytes_per_param() const = 0;

  // Bytes of state this optimizer holds.
  int64_t state_bytes();
};

}  // namespace cadre
