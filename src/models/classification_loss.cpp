// Classification cross-entropy through ATen's own label-smoothing kernel (the one
// torch.nn.functional.cross_entropy calls).
#include "models/classification_loss.h"

#include <ATen/ATen.h>
#include <ATen/core/Reduction.h>

namespace cadre {

at::Tensor classification_loss(const at::Tensor& logits, const at::Tensor& target, double label_smoothing) {
  return at::cross_entropy_loss(logits.to(at::kFloat), target, /*weight=*/{}, at::Reduction::Mean,
                                /*ignore_index=*/-100, label_smoothing);
}

}  // namespace cadre
