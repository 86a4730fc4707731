// The state size shared by every optimizer.
#include "optim/optimizer.h"

namespace cadre {

int64_t Optimizer::state_bytes() {
  int64_t bytes = 0;
  for (const OptimizerState& s : state())
    for (const at::Tensor& t : *s.tensors) bytes += t.numel() * static_cast<int64_t>(t.element_size());
  return bytes;
}

}  // namespace cadre
